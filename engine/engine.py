"""The engine's front door: load a target (and a draft), then stream answers to conversations."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from engine.chat_template import ChatFormatter
from engine.compat import check_compatible
from engine.config import ChatMessage, ModelSpec, SamplingParams, SpecParams
from engine.errors import ContextFullError, ModelLoadError, OperationCancelled
from engine.events import DoneEvent, Event, FinishReason
from engine.generate import Speculator
from engine.gguf import read_header
from engine.metrics import AnswerStats
from engine.prompt_tokens import PromptTokenizer
from engine.reasoning import ReasoningSplitter
from engine.runner import Cancelled, ModelRunner

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
    calibration: dict
    cpu_weights: str = ""  # how the target's CPU weights are laid out, AMX decision included
    amx: str = "none"  # "none", "avoided" (llama.cpp's AMX path crashes) or "on"


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
    ):
        """Load the models and measure this machine.

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
        if draft is not None:
            # Refuse an incompatible draft from the headers, before spending time loading it.
            check_compatible(target_info, read_header(draft.path))
        self.draft = None
        try:
            self.target = _load(target, stage("Loading target"), cancelled)
            if draft is not None:
                self.draft = _load(draft, stage("Loading draft"), cancelled)
            report("Measuring this machine", 0.0)
            for runner in (self.target, self.draft):
                if runner is not None:
                    runner.cancel_event = cancel  # calibration decodes stop at the next one
            try:
                self.speculator = Speculator(self.target, self.draft)
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
        self.formatter = ChatFormatter(self.target.info)
        self.prompt_tokenizer = PromptTokenizer(self.target.vocab, self.target.n_vocab)

    def set_chat_template(self, override: str | None) -> None:
        """Format conversations with a llama.cpp preset name or a Jinja text; None: the model's own way."""
        self.formatter = ChatFormatter(self.target.info, override)

    @property
    def info(self) -> EngineInfo:
        t, d = self.target, self.draft
        return EngineInfo(
            target_name=t.info.name,
            draft_name=d.info.name if d else None,
            backend=t.backend,
            target_gpu_layers=t.gpu_layers,
            target_layers=t.n_layers,
            draft_gpu_layers=d.gpu_layers if d else 0,
            n_ctx=t.n_ctx,
            n_threads=t.n_threads,
            memory_bytes=sum(r.model_bytes + r.context_bytes for r in (t, d) if r),
            calibration=self.speculator.costs.as_dict(),
            cpu_weights=t.weights.summary,
            amx=t.weights.amx,
        )

    def close(self) -> None:
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
    ) -> Iterator[Event]:
        """Stream the assistant's answer to a conversation (the last message is the user's)."""
        t_request = time.perf_counter()
        sampling = sampling or SamplingParams()
        spec = spec or SpecParams()
        stats = AnswerStats()
        if self.formatter.stop_strings:
            sampling = sampling.with_(stop=tuple(sampling.stop) + self.formatter.stop_strings)
        try:
            prompt, stats.n_history_dropped = self.fit_conversation(messages, sampling.max_tokens)
        except ContextFullError as e:
            yield DoneEvent(FinishReason.CONTEXT, stats, "", e.user_message())
            return
        opening, closing = self.formatter.reasoning_markers
        splitter = ReasoningSplitter(opening, closing, thinking=self.formatter.opens_reasoning)
        yield from self.speculator.stream(prompt, sampling, spec, cancel, stats, t_request, splitter)

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

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The conversation as prompt tokens: the template's markers as control tokens, content as text."""
        return self.prompt_tokenizer.tokens(self.formatter.segments(messages))

    def fit_conversation(self, messages: Sequence[ChatMessage], max_tokens: int) -> tuple[list[int], int]:
        """Tokenize the conversation, dropping the oldest turns (never the system prompt) to fit.

        Returns the prompt tokens and how many messages were dropped.
        """
        n_ctx = self.target.n_ctx
        room = min(max_tokens, max(MIN_ANSWER_ROOM, n_ctx // 4))
        system = [m for m in messages[:1] if m.role == "system"]
        rest = list(messages[len(system) :])
        dropped = 0
        while True:
            tokens = self.prompt_tokens(system + rest)
            if len(tokens) + room <= n_ctx or len(rest) <= 1:
                break
            # Drop the oldest exchange; keep the conversation starting with a user message.
            rest.pop(0)
            dropped += 1
            while len(rest) > 1 and rest[0].role != "user":
                rest.pop(0)
                dropped += 1
        if len(tokens) >= n_ctx:
            with_system = " with the system prompt" if system else ""
            raise ContextFullError(
                f"The message is {len(tokens):,} tokens long{with_system}, "
                f"but the context holds {n_ctx:,}: no room is left for an answer."
            )
        return tokens, dropped


def _load(spec: ModelSpec, progress: Callable[[float], bool], cancelled: Callable[[], bool]) -> ModelRunner:
    """A ModelRunner; a load abandoned by the progress callback is reported as cancelled, not failed."""
    if cancelled():
        raise OperationCancelled("Loading the models was cancelled.")
    try:
        return ModelRunner(spec, progress)
    except ModelLoadError:
        if cancelled():
            raise OperationCancelled("Loading the models was cancelled.") from None
        raise
