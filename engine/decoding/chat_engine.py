"""The engine's front door: load a target (and a draft), then stream answers to conversations."""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.chat.harmony import MARKERS as HARMONY_MARKERS
from engine.chat.harmony import HarmonySplitter
from engine.chat.prompt_tokens import PromptTokenizer
from engine.chat.reasoning import ReasoningSplitter
from engine.chat.template import ChatFormatter
from engine.config import ChatMessage, ModelSpec, SamplingParams, SpecParams
from engine.decoding import auto_memory, fitting
from engine.decoding.collection_drafts import CollectionTokens, WholeText
from engine.decoding.events import DoneEvent, Event, FinishReason
from engine.decoding.fitting import Fitted
from engine.decoding.policy import Calibration
from engine.decoding.speculator import Speculator
from engine.decoding.stats import AnswerStats
from engine.decoding.tool_grammar import GrammarTrack, make_tool_grammar
from engine.decoding.tool_stream import with_tool_calls
from engine.errors import ContextFullError, ModelLoadError, OperationCancelled
from engine.gguf.header import read_header
from engine.gguf.names import display_name
from engine.gguf.pairing import check_compatible
from engine.history import store as history_store
from engine.llama import backends, offload
from engine.llama.memory import MemoryKind
from engine.llama.runner import Cancelled, ModelRunner, common_prefix
from engine.tools import ToolCallParser, ToolChoice, ToolChoiceMode, ToolSpec, json_quoted

log = logging.getLogger(__name__)

# Room kept free for the answer when deciding how much history fits.
MIN_ANSWER_ROOM = 256


@dataclass(frozen=True)
class EngineInfo:
    target_name: str
    draft_name: str | None
    backend: str  # "CPU", "CUDA", "Metal", ...
    target_gpu_layers: int
    target_layers: int
    draft_gpu_layers: int
    n_ctx: int
    n_threads: int
    memory_bytes: int  # weights plus contexts
    calibration: Calibration  # what decoding costs on this machine, measured
    cpu_weights: str = ""  # how the target's CPU weights are laid out, AMX decision included
    amx: str = "none"  # "none", "avoided" (llama.cpp's AMX path crashes) or "on"
    draft_layers: int = 0
    device: str = ""  # the GPU's name when one is used: "NVIDIA GeForce RTX 3060"
    vram_total: int = 0  # bytes, 0 without a GPU
    vram_free: int = 0  # bytes free after loading
    gpu_note: str = ""  # why there is no GPU, or why not everything is on it
    draft_memory_bytes: int = 0  # the draft model's share of memory_bytes: what unloading it frees
    target_memory: str = "kv"  # engine.llama.memory.MemoryKind: how the target remembers the context
    draft_memory: str = ""
    checkpoint_bytes: int = 0  # recurrent-state checkpoints kept now (both models)
    speculation_note: str = ""  # why speculation is off, or why the draft model is not used ("" when neither)
    mtp: str = ""  # the target's MTP head: "" (its file has none), "loaded" or why it is not used
    mtp_bytes: int = 0  # the head's weights (loaded or not)
    n_ctx_train: int = 0  # the context the target was trained with (its GGUF says); 0: not known
    tools_native: bool = True  # its chat template renders tools (else they are described in the system prompt)

    def memory_text(self) -> str:
        """ "hybrid: attention + recurrent state (checkpoints 1.2 MB)" for the target, and the draft's if it differs."""
        text = MemoryKind(self.target_memory).label
        if self.draft_memory and self.draft_memory != self.target_memory:
            text += f"; draft: {MemoryKind(self.draft_memory).label}"
        if self.checkpoint_bytes:
            text += f" (checkpoints {self.checkpoint_bytes / 1e6:.1f} MB)"
        if self.mtp == "loaded":
            text += f"; MTP head loaded ({self.mtp_bytes / 1e6:,.1f} MB of weights)"
        elif self.mtp:
            text += f"; MTP head not used: {self.mtp} ({self.mtp_bytes / 1e6:,.1f} MB)"
        return text

    def placement(self) -> str:
        """Where the models run, in a line: "Vulkan (llvmpipe), 31/31 layers on GPU (draft 31/31)" or "CPU (why)"."""
        if self.backend == "CPU":
            return f"CPU ({self.gpu_note})" if self.gpu_note else "CPU"
        return f"{self.backend} ({self.device}), {self.gpu_layers()}" + (f"; {self.gpu_note}" if self.gpu_note else "")

    def gpu_layers(self) -> str:
        """ "31/31 layers on GPU (draft 31/31)": each model's offloaded layers of all (the output layer counts)."""
        text = f"{self.target_gpu_layers}/{self.target_layers + 1} layers on GPU"
        return text + (f" (draft {self.draft_gpu_layers}/{self.draft_layers + 1})" if self.draft_name else "")


class Engine:
    """A target model, an optional draft model, and the speculation state between them.

    Not thread-safe: one thread owns an Engine (the app's worker thread, or the CLI). Only
    the cancel event passed to chat() may be set from another thread.
    """

    def __init__(
        self,
        target: ModelSpec,
        draft: ModelSpec | None = None,
        progress: Callable[[str, float], None] | None = None,
        cancel: threading.Event | None = None,
        history_dir: Path | None = None,
        history_max_tokens: int = history_store.DEFAULT_MAX_TOKENS,
        memory_file: Path | None = None,
    ):
        """Load the models and measure this machine.

        history_dir, when given, holds the user's history indexes, one folder per vocabulary: the
        target's is opened, auto drafts from it, and chat(remember=...) adds to it.

        memory_file, when given, keeps what auto learns of the drafters' acceptance across restarts
        (engine.paths.auto_memory_file(); engine.decoding.auto_memory): read now, written after each answer.

        cancel, when set from another thread, abandons the load within one tensor (llama.cpp
        asks the progress callback between tensors) or one calibration decode, and raises
        OperationCancelled; everything loaded so far is freed.
        """
        report = progress or (lambda _stage, _fraction: None)
        cancelled = cancel.is_set if cancel is not None else (lambda: False)

        def stage(name: str) -> Callable[[float], bool]:
            def progress(fraction: float) -> bool:
                report(name, fraction)
                return not cancelled()  # False tells llama.cpp to stop loading

            return progress

        target_info = read_header(target.path)
        draft_info = read_header(draft.path) if draft is not None else None
        if draft_info is not None:
            # Refuse an incompatible draft from the headers, before spending time loading it.
            check_compatible(target_info, draft_info)
        self.draft = None
        self.history = None
        self.memory_file = Path(memory_file) if memory_file is not None else None
        self.history_dir = Path(history_dir) if history_dir is not None else None
        self.gpu = backends.ensure_loaded().gpu
        target, draft, note = _place_on_gpu(target, target_info, draft, draft_info, self.gpu)
        self.gpu_notes = [note] if note else []
        try:
            self.target = _load(target, stage("Loading target"), cancelled, self.gpu_notes)
            if draft is not None:
                self.draft = _load(draft, stage("Loading draft"), cancelled, self.gpu_notes)
            report("Measuring this machine", 0.0)
            for runner in (self.target, self.draft):
                if runner is not None:
                    runner.cancel_event = cancel  # calibration decodes stop at the next one
            if self.history_dir is not None:
                self.history = history_store.HistoryIndex(
                    self.history_dir / target_info.vocab_fingerprint, self.target.n_vocab, history_max_tokens
                )
            try:
                self.speculator = Speculator(self.target, self.draft, history=self.history)
                self.memory_key = auto_memory.pair_key(target.path, draft.path if draft else None, self.target.backend)
                if self.memory_file is not None:
                    self.speculator.recall(auto_memory.load(self.memory_file, self.memory_key))
            except Cancelled:
                raise OperationCancelled("Loading the models was cancelled.") from None
            finally:
                for runner in (self.target, self.draft):
                    if runner is not None:
                        runner.cancel_event = None
            report("Ready", 1.0)
        except BaseException:
            self.close()
            raise
        # Names for people (engine/gguf/names.py), or what the user renamed the model to.
        self.target_name = target.name or display_name(target_info, target.path)
        self.draft_name = (draft.name or display_name(draft_info, draft.path)) if draft is not None else None
        self.prompt_tokenizer = PromptTokenizer(self.target.vocab, self.target.n_vocab)
        self.formatter = ChatFormatter(self.target.info, controls=self.prompt_tokenizer.controls)
        self.collection_tokens = CollectionTokens(self.prompt_tokenizer.plain, vocabulary=target_info.vocab_fingerprint)
        self._markers: dict[tuple[str, ...], dict[int, bytes]] = {}  # per set of markers (_marker_pieces)

    def set_chat_template(self, override: str | None) -> None:
        """Format conversations with a llama.cpp preset name or a Jinja text; None: the model's own way."""
        self.formatter = ChatFormatter(self.target.info, override, self.prompt_tokenizer.controls)

    @property
    def info(self) -> EngineInfo:
        t, d = self.target, self.draft
        gpu = backends.current().gpu if self.gpu else None  # free memory now, models loaded
        uses_gpu = t.gpu_layers > 0 or (d is not None and d.gpu_layers > 0)
        return EngineInfo(
            target_name=self.target_name,
            draft_name=self.draft_name if d else None,
            backend=gpu.backend if gpu and uses_gpu else "CPU",
            target_gpu_layers=t.gpu_layers,
            target_layers=t.n_layers,
            draft_gpu_layers=d.gpu_layers if d else 0,
            n_ctx=t.n_ctx,
            n_threads=t.n_threads,
            memory_bytes=sum(r.model_bytes + r.context_bytes for r in (t, d) if r),
            calibration=self.speculator.costs.calibration(),
            cpu_weights=t.weights.summary,
            amx=t.weights.amx,
            draft_layers=d.n_layers if d else 0,
            device=gpu.description if gpu and uses_gpu else "",
            vram_total=gpu.total_bytes if gpu and uses_gpu else 0,
            vram_free=gpu.free_bytes if gpu and uses_gpu else 0,
            gpu_note="; ".join(self.gpu_notes) if gpu else backends.ensure_loaded().gpu_problem,
            draft_memory_bytes=d.model_bytes + d.context_bytes if d else 0,
            target_memory=t.memory.value,
            draft_memory=d.memory.value if d else "",
            checkpoint_bytes=sum(r.checkpoints.nbytes for r in (t, d) if r),
            speculation_note=self.speculation_note,
            mtp="loaded" if t.mtp is not None else t.mtp_problem,
            mtp_bytes=t.info.mtp_bytes,
            n_ctx_train=t.n_ctx_train,
            tools_native=self.formatter.tools_native,
        )

    @property
    def speculation_note(self) -> str:
        """Why speculation is off on this target, or why its draft model is not used ("" for neither)."""
        if self.speculator.no_speculation_reason:
            return self.speculator.no_speculation_reason
        if self.draft is not None and self.draft.rollback_problem:
            return f"the draft model is not used: {self.draft.rollback_problem}, so its rejected drafts could not be undone"
        return ""

    def drop_draft(self) -> None:
        """Free the draft model and go on with the target alone (prompt lookup still drafts)."""
        if self.draft is None:
            return
        if self.memory_file is not None:  # the pair's memory stays the pair's; from now on the target's alone
            auto_memory.save(self.memory_file, self.memory_key, self.speculator.memory())
            self.memory_key = auto_memory.pair_key(self.target.spec.path, None, self.target.backend)
        self.speculator.drop_draft_model()
        self.draft.close()
        self.draft = None

    def close(self) -> None:
        if getattr(self, "collection_tokens", None) is not None:
            self.collection_tokens.close()  # it tokenizes with the target's vocabulary
        if getattr(self, "history", None) is not None:
            self.history.close()
        for runner in (getattr(self, "draft", None), getattr(self, "target", None)):
            if runner is not None:
                runner.close()

    def reset_cache(self) -> None:
        """Start from nothing: empty KV caches and no learned acceptance (costs stay measured).

        Switching conversations needs none of this (prefix matching handles it); it is for
        comparing runs fairly, as the benchmark does.
        """
        for runner in (self.target, self.draft):
            if runner is not None:
                runner.reset()
        self.speculator.forget_acceptance()

    # -- answering -------------------------------------------------------------------------

    def chat(
        self,
        messages: Sequence[ChatMessage],
        sampling: SamplingParams | None = None,
        spec: SpecParams | None = None,
        cancel: threading.Event | None = None,
        remember: int | None = None,
        documents: Sequence[str] = (),
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
        tool_grammar: bool = False,
        parallel_tool_calls: bool = True,
        collections: WholeText | None = None,
        cut_tool_results: bool = False,
    ) -> Iterator[Event]:
        """Stream the assistant's answer to a conversation (the last message is the user's, or a
        tool's result).

        remember: the conversation's id, to add the question and a finished answer to the history
        index (None: this answer is not the user's history, e.g. a benchmark or a comparison rerun).
        documents: texts of the user's documents found for this question (in its prompt or not):
        drafted from as "documents" (engine.decoding.drafters.DocumentDrafter) for this answer only.
        collections: the whole text of the collections searched (engine.documents.whole_text), drafted
        from too once indexed in this model's tokens, which starts on a thread of its own at the first
        answer that names them (collection_drafts.py).
        tools: functions the model may call, rendered by its chat template (formatter.tools_native)
        or described Hermes-style; tool_choice (default auto) may forbid calls, require one, or name
        the one function to call (the others are then not offered). The model's calls are read out of
        its text in its family's syntax: each complete call yields a ToolCallEvent (a
        MalformedToolCallEvent if it is not valid), its markup's TokenEvents are marked tool_call,
        and the DoneEvent lists them, with FinishReason.TOOL_CALLS when the answer stopped after
        calling. Run them and send back ChatMessage("tool", result, tool_call_id=call.id, name=call.name)
        after ChatMessage("assistant", done.text, tool_calls=done.tool_calls).
        tool_grammar: once the model opens a call, constrain it with a lazy grammar so that it parses
        and its arguments follow the tool's schema (in the family's syntax: Hermes, Llama 3.x or
        Mistral; engine/decoding/tool_grammar.py), verified losslessly; its cost is in
        DoneEvent.stats.grammar_s. With tool_choice required or a named function the grammar holds
        from the first token: the answer is calls and nothing else. parallel_tool_calls False: the
        grammar ends the answer after one call (a small model forced to call tends to repeat it).
        cut_tool_results: where the conversation does not fit, tool results lose their middle (with a
        note): older turns' before any turn is dropped, the answered turn's rather than ending with
        FinishReason.CONTEXT (engine.decoding.fitting); DoneEvent.stats.n_results_cut counts them.
        """
        t_request = time.perf_counter()
        sampling = sampling or SamplingParams()
        if sampling.seed is None and not sampling.greedy:  # drawn here, so the answer says which it was
            sampling = sampling.with_(seed=secrets.randbits(63))
        spec = spec or SpecParams()
        stats = AnswerStats(seed=None if sampling.greedy else sampling.seed)
        if self.formatter.stop_strings:
            sampling = sampling.with_(stop=tuple(sampling.stop) + self.formatter.stop_strings)
        tools, tool_choice = _offered(tools, tool_choice)
        try:
            prompt, stats.n_history_dropped, stats.n_results_cut = self.fit_conversation(
                messages, sampling.max_tokens, tools, tool_choice, cut_tool_results
            )
        except ContextFullError as e:
            yield DoneEvent(FinishReason.CONTEXT, stats, "", e.user_message())
            return
        if self.formatter.harmony:
            splitter = HarmonySplitter()
        else:
            opening, closing = self.formatter.reasoning_markers
            splitter = ReasoningSplitter(opening, closing, thinking=self.formatter.opens_reasoning)
        whole = self.collection_tokens.index_for(collections)
        self.speculator.documents.use([self.prompt_tokenizer.plain(text) for text in documents], whole)
        # A call quotes a tool's result inside a JSON string: lookup drafts from it as escaped there.
        results = [m.content for m in messages if m.role == "tool"] if tools else []
        quoted = [q for q in map(json_quoted, results) if q not in results]  # plain lookup has the others
        self.speculator.lookup.use_quotes([self.prompt_tokenizer.plain(text) for text in quoted])
        grammar = None
        if tool_grammar and tools:
            forced = tool_choice is not None and tool_choice.must_call
            grammar = make_tool_grammar(
                self.target.grammar_pieces, self.formatter.tool_syntax, tools, forced, single=not parallel_tool_calls
            )
        track = GrammarTrack(grammar) if grammar is not None else None
        events = self.speculator.stream(
            prompt, sampling, spec, cancel, stats, t_request, splitter, self._marker_pieces(bool(tools)), track
        )
        if tools:
            syntax = self.formatter.tool_syntax
            schemas = {t.name: t.parameters or {} for t in tools}
            events = with_tool_calls(events, ToolCallParser(syntax, [t.name for t in tools], schemas=schemas))
        try:
            for event in events:
                if isinstance(event, DoneEvent):
                    if remember is not None:
                        self._remember(remember, messages, prompt, event.finish_reason, tools, tool_choice)
                    if self.memory_file is not None:
                        auto_memory.save(self.memory_file, self.memory_key, self.speculator.memory())
                yield event
        finally:
            self.speculator.documents.use([])
            self.speculator.lookup.use_quotes([])
            if track is not None:
                track.close()

    def _remember(
        self, conversation: int, messages: Sequence[ChatMessage], prompt: list[int], finish, tools=(), choice=None
    ) -> None:
        """Add the last turn (from where the question begins) and its answer to the history index."""
        if self.history is None or finish not in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.TOOL_CALLS):
            return
        try:
            before = self.prompt_tokens(messages[:-1], tools, choice) if len(messages) > 1 else []
        except Exception:  # noqa: BLE001 - a template that cannot render the earlier turns alone
            before = []
        start = common_prefix(before, prompt)
        self.history.add(conversation, prompt[start:] + self.speculator.last_answer)

    def forget_history(self, conversation: int | None) -> None:
        """Remove a conversation's tokens from every vocabulary's history index (None: erase them all)."""
        if self.history_dir is None:
            return
        if conversation is None:
            history_store.erase_everywhere(self.history_dir, self.history)
        else:
            history_store.forget_everywhere(self.history_dir, conversation, self.history)

    def complete(
        self,
        prompt_text: str,
        sampling: SamplingParams | None = None,
        spec: SpecParams | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream a raw continuation of prompt_text (no chat template)."""
        tokens = self.target.tokenize(prompt_text)
        yield from self.speculator.stream(tokens, sampling or SamplingParams(), spec or SpecParams(), cancel)

    def prompt_tokens(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = (), tool_choice: ToolChoice | None = None
    ) -> list[int]:
        """The conversation as prompt tokens: the template's markers as control tokens, content as text."""
        return self.prompt_tokenizer.tokens(self.formatter.segments(messages, tools, tool_choice))

    def _marker_pieces(self, tools: bool) -> dict[int, bytes] | None:
        """The markers the answer's readers must see that are control tokens here (silent in text), with
        their text: the tool-call syntax's (with tools), harmony's channel markup (always, for gpt-oss)."""
        markers = (self.formatter.tool_syntax.markers if tools else ()) + (
            HARMONY_MARKERS if self.formatter.harmony else ()
        )
        if not markers:
            return None
        if markers not in self._markers:
            tokens = self.target.info.tokens
            self._markers[markers] = {
                tokens.index(m): m.encode() for m in markers if m in tokens and not self.target.piece(tokens.index(m))
            }
        return self._markers[markers]

    def fits(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> bool:
        """Whether the conversation, with the tools it offers, leaves the answer its room (answer_room) in
        the context: what a search asks of each passage it would add (tool descriptions take room too)."""
        tokens = self.prompt_tokens(messages, *_offered(tools, tool_choice))
        return len(tokens) + self.answer_room(max_tokens) <= self.target.n_ctx

    def answer_room(self, max_tokens: int) -> int:
        """The tokens kept free for the answer when fitting a conversation (fit_conversation)."""
        return min(max_tokens, max(MIN_ANSWER_ROOM, self.target.n_ctx // 4))

    def fit_conversation(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
        cut_tool_results: bool = False,
    ) -> Fitted:
        """Tokenize the conversation, dropping the oldest turns (never the system prompt) to fit; with
        cut_tool_results, tool results lose their middle first (engine.decoding.fitting)."""
        return fitting.fit(
            messages,
            self.target.n_ctx,
            self.answer_room(max_tokens),
            lambda shown: self.prompt_tokens(shown, tools, tool_choice),
            lambda text: len(self.target.tokenize(text, special=False)),
            cut_tool_results,
        )


def _offered(tools: Sequence[ToolSpec], choice: ToolChoice | None) -> tuple[list[ToolSpec], ToolChoice | None]:
    """The tools the prompt offers under tool_choice: none for "none", only the named one for a function."""
    choice = choice or ToolChoice()
    if choice.mode == ToolChoiceMode.NONE:
        return [], None
    if choice.mode == ToolChoiceMode.FUNCTION:
        named = [t for t in tools if t.name == choice.name]
        if not named:
            raise ValueError(f"tool_choice names {choice.name!r}, which is not one of the tools")
        return named, choice
    return list(tools), choice


def _place_on_gpu(target: ModelSpec, target_info, draft: ModelSpec | None, draft_info, gpu) -> tuple:
    """Resolve "auto" GPU layers for both models together (offload.plan): (target, draft, note)."""
    if gpu is None:
        return target, draft, ""
    placed = offload.plan(
        offload.layer_costs(target_info, target.n_ctx, target.n_batch),
        target.n_gpu_layers,
        offload.layer_costs(draft_info, draft.n_ctx, draft.n_batch) if draft else None,
        draft.n_gpu_layers if draft else 0,
        gpu.free_bytes,
    )
    target = target.with_(n_gpu_layers=placed.target_layers)
    draft = draft.with_(n_gpu_layers=placed.draft_layers) if draft else None
    return target, draft, placed.note


def _load(
    spec: ModelSpec, progress: Callable[[float], bool], cancelled: Callable[[], bool], notes: list[str]
) -> ModelRunner:
    """A ModelRunner; a load abandoned by the progress callback is reported as cancelled, not failed.

    Out of GPU memory, the load is retried with half the GPU layers (down to none), and notes says so.
    """
    first_try = spec.n_gpu_layers
    while True:
        if cancelled():
            raise OperationCancelled("Loading the models was cancelled.")
        try:
            runner = ModelRunner(spec, progress)
        except ModelLoadError as error:
            if cancelled():
                raise OperationCancelled("Loading the models was cancelled.") from None
            layers = _resolved_layers(spec)
            if not error.out_of_memory or layers == 0 or backends.ensure_loaded().gpu is None:
                raise
            log.warning("%s; retrying with %d GPU layers", error, layers // 2)
            spec = spec.with_(n_gpu_layers=layers // 2)
            continue
        if spec.n_gpu_layers != first_try:
            name = os.path.basename(spec.path)
            notes.append(f"{name}: the GPU ran out of memory, so {runner.gpu_layers} of its layers are on it")
        return runner


def _resolved_layers(spec: ModelSpec) -> int:
    if spec.n_gpu_layers >= 0:
        return spec.n_gpu_layers
    return (read_header(spec.path).n_layers or 0) + 1
