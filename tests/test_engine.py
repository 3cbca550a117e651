"""The engine on real GGUF files through the real llama-cpp-python."""

import threading
import time

import numpy as np
import pytest

from engine.config import ChatMessage, DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding.drafters import Draft, Drafter, Offer, TrackerKey
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent
from engine.decoding.policy import CostModel

GREEDY = SamplingParams(temperature=0.0, max_tokens=48)
ASK = [ChatMessage("user", "List the first ten prime numbers, separated by commas.")]
AUTO = SpecParams()


def run(engine, messages=ASK, sampling=GREEDY, spec=AUTO, cancel=None):
    tokens, rounds, done = [], [], None
    for event in engine.chat(messages, sampling, spec, cancel):
        if isinstance(event, TokenEvent):
            tokens.append(event)
        elif isinstance(event, RoundEvent):
            rounds.append(event)
        else:
            assert isinstance(event, DoneEvent) and done is None
            done = event
    assert done is not None, "every answer ends with exactly one DoneEvent"
    assert "".join(t.text for t in tokens) == done.text
    return tokens, rounds, done


class ArgmaxRecorder:
    """Wraps the target's eval to record the argmax of every row the target computes."""

    def __init__(self, runner):
        self.runner, self.rows = runner, []
        self._eval = runner.eval

    def __call__(self, tokens, n_logits=1, **options):
        logits = self._eval(tokens, n_logits, **options)
        if logits is not None:
            self.rows.append((list(tokens[len(tokens) - n_logits + 1 :]), np.argmax(logits, axis=1).tolist()))
        return logits


def test_target_as_its_own_draft_accepts_essentially_everything(small_engine):
    _, rounds, done = run(small_engine, spec=SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4, draft_p_min=0.0))
    assert done.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert done.stats.n_drafted >= 20
    # Batched and single-token evaluation round differently; near-ties may flip a rare token.
    assert done.stats.acceptance_rate >= 0.9
    assert any(r.round.accepted == 4 for r in rounds)


def test_greedy_speculation_emits_the_targets_argmax_at_every_position(small_engine, monkeypatch):
    recorder = ArgmaxRecorder(small_engine.target)
    monkeypatch.setattr(small_engine.target, "eval", recorder)
    tokens, rounds, done = run(small_engine, spec=SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=3))
    monkeypatch.undo()
    verify_rows = [r for r in recorder.rows if len(r[1]) >= 1][-len(rounds) :]
    emitted = [t.token for t in tokens]
    produced = []
    for (drafts, argmax), rnd in zip(verify_rows, rounds, strict=True):
        assert drafts[: rnd.round.accepted] == argmax[: rnd.round.accepted], "an accepted draft differs from the argmax"
        produced += argmax[: rnd.round.accepted + 1]
    # Every emitted token is the argmax of the verification row at its position.
    assert emitted == produced[: len(emitted)]


def test_greedy_speculation_matches_plain_decoding(small_engine):
    _, _, plain = run(small_engine, spec=SpecParams(mode=DrafterMode.OFF))
    assert 0.8 < plain.stats.estimated_speedup < 1.25  # plain decoding priced against itself
    _, _, spec = run(small_engine, spec=SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4))
    assert plain.stats.n_drafted == 0 and spec.stats.n_drafted > 0
    assert spec.text == plain.text


def test_a_plain_answer_is_estimated_at_1x_however_slowly_its_events_are_read(small_engine, monkeypatch):
    """Plain decoding would pay, per token, what a plain step costs beyond its decode: sampling, the text
    layer and the reader of the events (a window, a server's client). Priced at the decode alone, a plainly
    decoded answer read by a slow reader was estimated well below 1x (about half, here)."""
    measured = small_engine.speculator.costs.calibration().verify_s
    monkeypatch.setattr(small_engine.speculator, "costs", CostModel(measured))  # no overhead measured yet
    done = None
    for event in small_engine.chat(ASK, GREEDY, SpecParams(mode=DrafterMode.OFF)):
        if isinstance(event, TokenEvent):
            time.sleep(0.01)
        done = event
    assert done.stats.n_tokens > 20 and done.stats.n_drafted == 0
    assert 0.85 < done.stats.estimated_speedup < 1.15


class Replay(Drafter):
    """A drafter written against the interface alone: it proposes the plain answer's next tokens."""

    kind = DrafterKind.DRAFT_MODEL
    source = TokenSource.DRAFT_MODEL
    modes = frozenset({DrafterMode.DRAFT_MODEL})

    def __init__(self, sequence: list[int]):
        super().__init__()
        self.sequence = sequence

    def offer(self, context, k_cap, earlier):
        n = len(context)
        if n >= len(self.sequence) or list(context) != self.sequence[:n]:
            return None
        return Offer(self, TrackerKey(self.kind), min(k_cap, len(self.sequence) - n))

    def draft(self, context, k, sampling, rng, p_min, joint=False):
        tokens = self.sequence[len(context) : len(context) + k]
        return Draft(self.kind, k, tokens, [None] * len(tokens), source=self.source)

    def learn(self, draft, verdict):
        pass


def test_a_new_drafter_class_drafts_through_the_loop_losslessly(small_engine, monkeypatch):
    _, _, plain = run(small_engine, spec=SpecParams(mode=DrafterMode.OFF))
    replay = Replay(small_engine.prompt_tokens(ASK) + small_engine.speculator.last_answer)
    monkeypatch.setattr(small_engine.speculator, "drafters", [replay])
    _, _, done = run(small_engine, spec=SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4))
    assert done.text == plain.text
    assert done.stats.n_accepted == done.stats.n_drafted > 10
    assert (replay.n_drafted, replay.n_accepted) == (done.stats.n_drafted, done.stats.n_accepted)


def test_token_sources_are_reported(small_engine):
    tokens, _, done = run(small_engine, spec=SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4))
    sources = {t.source for t in tokens}
    assert TokenSource.DRAFT_MODEL in sources and TokenSource.TARGET in sources
    assert sum(done.stats.tokens_by_source.values()) == done.stats.n_tokens


def test_eos_inside_a_draft_ends_the_answer_there(small_engine, monkeypatch):
    drafts = []
    draft_model = small_engine.speculator.drafter(DrafterKind.DRAFT_MODEL)
    propose = draft_model.draft

    def recording_propose(*args, **kwargs):
        d = propose(*args, **kwargs)
        drafts.append(list(d.tokens))
        return d

    monkeypatch.setattr(draft_model, "draft", recording_propose)
    messages = [ChatMessage("user", "Reply with just the word yes.")]
    eog = small_engine.target.eog_ids
    # Where the EOS falls depends on the answer's length, which differs between CPUs (kernels
    # round differently): try draft lengths until one puts the EOS inside a draft, not after it.
    for k in (8, 5, 6, 7, 9, 3, 4, 10, 11, 12, 13):
        drafts.clear()
        spec = SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=k, draft_p_min=0.0)
        tokens, rounds, done = run(small_engine, messages, SamplingParams(temperature=0.0, max_tokens=64), spec)
        if any(t in eog for d in drafts for t in d):
            break
    assert any(t in eog for d in drafts for t in d), "no draft length made the draft model draft the EOS"
    # It stops there: what it drafted after the end would be verified and never used.
    ended = [d for d in drafts if any(t in eog for t in d)]
    assert all(next(i for i, t in enumerate(d) if t in eog) == len(d) - 1 for d in ended)
    assert done.stats.n_accepted <= done.stats.n_tokens + 1  # drafts kept are the answer's, and its end
    assert done.finish_reason == FinishReason.STOP
    assert not any(t.token in eog for t in tokens)
    assert len(tokens) < 64
    _, _, plain = run(
        small_engine, messages, SamplingParams(temperature=0.0, max_tokens=64), SpecParams(mode=DrafterMode.OFF)
    )
    assert done.text == plain.text


def test_cancel_mid_answer_then_answer_again(small_engine):
    cancel = threading.Event()
    seen = 0
    done = None
    for event in small_engine.chat(ASK, SamplingParams(temperature=0.0, max_tokens=200), SpecParams(), cancel):
        if isinstance(event, TokenEvent):
            seen += 1
            if seen == 5:
                cancel.set()
        elif isinstance(event, DoneEvent):
            done = event
    assert done.finish_reason == FinishReason.CANCELLED
    assert done.stats.n_tokens <= 5 + SpecParams().max_draft_length  # the round in flight, at most
    # The caches are consistent: the next answer is the same as an uninterrupted one.
    _, _, again = run(small_engine)
    small_engine.reset_cache()
    _, _, fresh = run(small_engine)
    assert again.text == fresh.text and again.finish_reason != FinishReason.CANCELLED


def test_follow_up_turn_reuses_the_cache(small_engine):
    _, _, first = run(small_engine)
    follow = [*ASK, ChatMessage("assistant", first.text), ChatMessage("user", "Now the next five.")]
    _, _, second = run(small_engine, follow)
    assert second.stats.n_prompt_evaluated < second.stats.n_prompt_tokens / 2


def test_stop_strings_cut_the_answer(small_engine):
    _, _, plain = run(small_engine)
    middle = len(plain.text) // 2
    stop = plain.text[middle : middle + 3]  # spans token boundaries more often than not
    cut = plain.text.index(stop)
    _, _, stopped = run(small_engine, sampling=GREEDY.with_(stop=(stop,)))
    assert stopped.finish_reason == FinishReason.STOP and stopped.text == plain.text[:cut]


def test_max_tokens_ends_with_length(small_engine):
    tokens, _, done = run(small_engine, sampling=GREEDY.with_(max_tokens=7))
    assert done.finish_reason == FinishReason.LENGTH and done.stats.n_tokens == 7


def test_sampled_answers_are_reproducible_with_a_seed(small_engine):
    sampling = SamplingParams(temperature=0.9, seed=42, max_tokens=32)
    # Fixed draft length and confidence floor: an adaptive floor follows measured costs (wall-clock),
    # and a draft cut one token shorter makes a narrower verification batch, whose logits round
    # differently; at a near-tie that changes a sampled token. The seed fixes the sampling only.
    spec = SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=3, draft_p_min=0.0)
    _, _, a = run(small_engine, sampling=sampling, spec=spec)
    _, _, b = run(small_engine, sampling=sampling, spec=spec)
    assert a.text == b.text and a.stats.n_drafted > 0


class RowRecorder:
    """Wraps the target's eval to keep, per position, the last logits row that predicted it (a position is
    predicted again only while nothing is committed there: the last row is the one its token was drawn from)."""

    def __init__(self, runner):
        self.runner, self.rows = runner, {}
        self._eval = runner.eval

    def __call__(self, tokens, n_logits=1, **options):
        logits = self._eval(tokens, n_logits, **options)
        if logits is not None:
            first = len(tokens) - n_logits + 1  # row j predicts the token at position first + j
            for j in range(n_logits):
                self.rows[first + j] = np.array(logits[j])
        return logits


def test_sampled_tokens_are_the_targets_own_keyed_draws_whatever_lookup_proposed(small_engine, monkeypatch):
    """Above temperature 0 each token is the draw the answer's seed makes at its position from the row the
    target computed there, so a lookup draft changes no token: plain decoding draws the same ones."""
    from engine.decoding.sampling import Draws, distribution

    recorder = RowRecorder(small_engine.target)
    monkeypatch.setattr(small_engine.target, "eval", recorder)
    sampling = SamplingParams(temperature=0.9, seed=7, max_tokens=48)
    code = "def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    ask = [ChatMessage("user", f"Repeat this code exactly, then rename w to width:\n\n{code}")]
    tokens, _, done = run(small_engine, ask, sampling, SpecParams(mode=DrafterMode.LOOKUP, draft_length=4))
    assert done.stats.n_drafted > 0 and done.stats.seed == 7
    answer = [t.token for t in tokens]
    draws = Draws(7)
    for position, token in enumerate(answer, done.stats.n_prompt_tokens):  # the answer follows the prompt
        assert token == distribution(recorder.rows[position], sampling).drawn_with(draws.at(position))
    _, _, unseeded = run(small_engine, ask, sampling.with_(seed=None, max_tokens=4), AUTO)
    assert isinstance(unseeded.stats.seed, int)  # drawn for the answer, and said


def test_statistics_are_filled_in(small_engine):
    _, rounds, done = run(small_engine, spec=SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4))
    s = done.stats
    assert s.n_rounds == len(rounds) and s.n_drafted == sum(r.round.drafted for r in rounds)
    assert s.n_accepted == sum(r.round.accepted for r in rounds)
    assert sum(s.accepted_hist.values()) == sum(1 for r in rounds if r.round.drafted)
    assert s.ttft_s > 0 and s.gen_tps > 0 and s.prompt_s > 0 and s.target_step_s > 0
    assert 0 < s.estimated_speedup < 10
    assert s.t_draft > 0 and s.t_verify > 0
    assert s.mean_accepted_length == pytest.approx(s.n_accepted / sum(s.accepted_hist.values()))


def test_a_prompt_longer_than_the_context_is_refused_clearly(smollm2_path):
    from engine.config import ModelSpec
    from engine.decoding.chat_engine import Engine

    engine = Engine(ModelSpec(smollm2_path, n_ctx=256))
    try:
        _, _, done = run(engine, [ChatMessage("user", "word " * 600)])
        assert done.finish_reason == FinishReason.CONTEXT
        assert "context holds 256" in done.error
        # Old turns are dropped to make room, and the statistics say so.
        history = []
        for i in range(6):
            history += [
                ChatMessage("user", f"Question {i}: " + "tell me more " * 12),
                ChatMessage("assistant", "ok " * 30),
            ]
        _, _, done = run(engine, [*history, ChatMessage("user", "Last question?")], GREEDY.with_(max_tokens=16))
        assert done.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
        assert done.stats.n_history_dropped > 0
        # An answer that runs into the end of the context ends with a reason, not an exception.
        _, _, done = run(
            engine,
            [ChatMessage("user", "Count from 1 to 500 " + "please " * 60)],
            SamplingParams(temperature=0.0, max_tokens=1000),
        )
        assert done.finish_reason in (FinishReason.CONTEXT, FinishReason.STOP)
    finally:
        engine.close()


def test_prompt_lookup_accepts_drafts_on_a_copy_heavy_prompt(qwen_engine):
    code = (
        "def total_price(items, tax_rate):\n"
        "    subtotal = sum(item.price * item.quantity for item in items)\n"
        "    tax = subtotal * tax_rate\n"
        "    return round(subtotal + tax, 2)\n"
    )
    messages = [
        ChatMessage("user", f"Rename the function total_price to compute_total. Reply with the code only.\n\n{code}")
    ]
    spec = SpecParams(mode=DrafterMode.LOOKUP, draft_length=6)
    tokens, _, done = run(qwen_engine, messages, SamplingParams(temperature=0.0, max_tokens=80), spec)
    assert "compute_total" in done.text
    assert done.stats.n_accepted >= 20
    assert done.stats.acceptance_rate > 0.5
    assert any(t.source == TokenSource.LOOKUP for t in tokens)


def test_chinese_text_streams_intact(qwen_engine):
    messages = [ChatMessage("user", "用中文写一句关于猫的短句。")]
    tokens, _, done = run(qwen_engine, messages, SamplingParams(temperature=0.0, max_tokens=40))
    assert any("\u4e00" <= ch <= "\u9fff" for ch in done.text)
    assert "\ufffd" not in done.text
    assert all("\ufffd" not in t.text for t in tokens)


def test_qwen_pair_greedy_speculation_with_the_draft_model(qwen_engine):
    spec = SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4, draft_p_min=0.0)
    _, _, done = run(qwen_engine, sampling=GREEDY, spec=spec)
    assert done.stats.n_drafted > 0 and done.stats.acceptance_rate > 0.5
    assert "2, 3, 5, 7" in done.text


class TripsAfter(threading.Event):
    """A cancel flag that turns itself on after it has been read n times (mid-prompt, deterministically)."""

    def __init__(self, n):
        super().__init__()
        self.reads, self.n = 0, n

    def is_set(self):
        self.reads += 1
        return self.reads > self.n


def test_a_tool_result_too_long_for_the_context_loses_its_middle_not_the_answer(smollm2_path):
    """The app's tool loop (cut_tool_results): older turns' results give way first, then older turns, then
    the middle of the answered turn's results, with a note; the question and both ends of the result stay.
    Without it, the context is full."""
    from engine.config import ModelSpec
    from engine.decoding.chat_engine import Engine
    from engine.tools import ToolCall, ToolSpec

    engine = Engine(ModelSpec(smollm2_path, n_ctx=512))
    try:
        read = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
        older = [ChatMessage("user", "Earlier question " * 20), ChatMessage("assistant", "Earlier answer " * 20)]
        turn = [
            ChatMessage("user", "What does big.txt say?"),
            ChatMessage("assistant", "", tool_calls=(ToolCall("call_1", "read_file", {"path": "big.txt"}),)),
            ChatMessage("tool", "BEGIN " + " ".join(f"line {i}" for i in range(1500)) + " END", tool_call_id="call_1"),
        ]
        sampling = GREEDY.with_(max_tokens=16)
        done = list(engine.chat([*older, *turn], sampling, SpecParams(), tools=[read]))[-1]
        assert done.finish_reason == FinishReason.CONTEXT

        fitted = engine.fit_conversation([*older, *turn], 16, [read], cut_tool_results=True)
        assert (fitted.dropped, fitted.results_cut) == (2, 1)
        assert len(fitted.tokens) + engine.answer_room(16) <= engine.target.n_ctx
        prompt = b"".join(engine.target.piece(t) for t in fitted.tokens).decode()
        assert "What does big.txt say?" in prompt and "Earlier question" not in prompt
        assert "BEGIN line 0 line 1" in prompt and "line 1499 END" in prompt and "line 700 " not in prompt
        assert "characters of this result left out here: it did not fit in the model's context" in prompt

        done = list(engine.chat([*older, *turn], sampling, SpecParams(), tools=[read], cut_tool_results=True))[-1]
        assert done.finish_reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.TOOL_CALLS)
        assert done.stats.n_results_cut == 1 and done.stats.n_history_dropped == 2

        # An older turn's result gives way before the turn itself: what was asked and answered stays.
        follow_up = [*turn, ChatMessage("assistant", "It lists lines."), ChatMessage("user", "How many lines?")]
        fitted = engine.fit_conversation(follow_up, 16, [read], cut_tool_results=True)
        prompt = b"".join(engine.target.piece(t) for t in fitted.tokens).decode()
        assert (fitted.dropped, fitted.results_cut) == (0, 1)
        assert "What does big.txt say?" in prompt and "It lists lines." in prompt and "How many lines?" in prompt
    finally:
        engine.close()


def test_cut_middle_keeps_both_ends_and_says_how_much_went():
    from engine.decoding.fitting import cut_middle

    text = "".join(chr(ord("a") + i % 26) for i in range(300))
    cut = cut_middle(text, 90)
    assert cut.startswith(text[:60]) and cut.endswith(text[-30:]) and "210 characters of this result" in cut
    assert cut_middle(text, 300) == text and cut_middle(text, 0).strip().startswith("[… 300 characters")


def test_cancel_interrupts_a_long_prompt_and_the_cache_stays_consistent(small_engine):
    long_ask = [ChatMessage("user", "Summarise: " + "the quick brown fox jumps over the lazy dog. " * 60)]
    small_engine.reset_cache()
    cancel = TripsAfter(20)  # a few checks pass, then llama.cpp's abort callback fires inside a decode
    tokens, _, done = run(small_engine, long_ask, cancel=cancel)
    assert done.finish_reason == FinishReason.CANCELLED and not tokens
    assert cancel.reads > 20, "the abort callback was consulted during the prompt"
    prompt = small_engine.fit_conversation(long_ask, GREEDY.max_tokens).tokens
    cached = small_engine.target.cached
    assert len(cached) < len(prompt) - 1 and cached == prompt[: len(cached)], "the cache holds a clean prefix"
    _, _, after = run(small_engine, long_ask)
    small_engine.reset_cache()
    _, _, fresh = run(small_engine, long_ask)
    assert after.text == fresh.text


def test_a_draft_with_a_smaller_context_is_skipped_not_fatal(smollm2_path):
    from engine.config import ModelSpec
    from engine.decoding.chat_engine import Engine

    # llama.cpp rounds a context up to 256 cells: a 300-token prompt overflows the draft's.
    engine = Engine(ModelSpec(smollm2_path, n_ctx=1024), ModelSpec(smollm2_path, n_ctx=64))
    try:
        assert engine.draft.n_ctx < 300 < engine.target.n_ctx
        spec = SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4)
        _, _, done = run(engine, [ChatMessage("user", "Describe a sunset over the sea. " * 40)], GREEDY, spec)
        assert done.finish_reason in (FinishReason.STOP, FinishReason.LENGTH) and done.stats.n_tokens > 0
        assert done.stats.n_drafted == 0
    finally:
        engine.close()
