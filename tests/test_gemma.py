"""A second real model family: Gemma 3 270M (base), whose file has no chat template and whose
vocabulary has 262,144 tokens."""

import time

import numpy as np
import pytest

from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams, TokenSource
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent
from engine.decoding.sampling import distribution, make_rng

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)
# Copy-heavy, so prompt lookup has something to draft from.
COPY = [
    ChatMessage("system", "Repeat the user's text exactly."),
    ChatMessage("user", "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."),
]


@pytest.fixture(scope="module")
def gemma_engine(gemma3_path):
    from engine.decoding.chat_engine import Engine

    engine = Engine(ModelSpec(gemma3_path, n_ctx=1024))
    yield engine
    engine.close()


def run(engine, messages, spec, sampling=GREEDY):
    tokens, rounds, done = [], [], None
    for event in engine.chat(messages, sampling, spec):
        if isinstance(event, TokenEvent):
            tokens.append(event)
        elif isinstance(event, RoundEvent):
            rounds.append(event)
        else:
            assert isinstance(event, DoneEvent)
            done = event
    return tokens, rounds, done


def test_gemma_prompts_use_its_own_format(gemma_engine):
    prompt = gemma_engine.prompt_tokens(COPY)
    start = [gemma_engine.target.token_text(t) for t in prompt[:4]]
    assert start == ["<bos>", "<start_of_turn>", "user", "\n"]
    assert gemma_engine.formatter.format(COPY).startswith("<start_of_turn>user\nRepeat the user's text exactly.\n\n")


def test_greedy_speculation_with_prompt_lookup_is_lossless(gemma_engine):
    """Identical to plain decoding, or different only where the target's top two tokens tie to
    within rounding (batched and single-token evaluation round differently)."""
    plain_tokens, _, plain = run(gemma_engine, COPY, SpecParams(mode=DrafterMode.OFF))
    spec_tokens, rounds, spec = run(gemma_engine, COPY, SpecParams(mode=DrafterMode.LOOKUP))
    assert plain.stats.n_drafted == 0
    assert spec.stats.n_drafted > 0 and spec.stats.n_accepted > 0, "prompt lookup never drafted on a copy"
    assert any(t.source == TokenSource.LOOKUP for t in spec_tokens)
    a, b = [t.token for t in plain_tokens], [t.token for t in spec_tokens]
    if a != b:
        i = next(i for i in range(min(len(a), len(b))) if a[i] != b[i])
        logits = gemma_engine.target.eval(gemma_engine.prompt_tokens(COPY) + a[:i], 1)[0]
        gap = abs(float(logits[a[i]]) - float(logits[b[i]]))
        assert gap < 0.05 * max(1.0, abs(float(logits[a[i]]))), f"diverged at token {i} without a near-tie"


def test_the_answer_ends_at_end_of_turn_even_inside_a_draft(gemma_engine, monkeypatch):
    """The base model never ends a turn by itself (<end_of_turn> ranks ~17,000th after an answer),
    so its logits are given one that does: from the 6th answer token on, <end_of_turn> is its argmax.
    Prompt lookup drafts the copy, so the end arrives inside verified drafts."""
    eot = next(t for t in range(gemma_engine.target.n_vocab) if gemma_engine.target.token_text(t) == "<end_of_turn>")
    prompt = gemma_engine.prompt_tokens(COPY)
    stop_at = len(prompt) + 5
    evaluate = gemma_engine.target.eval

    def wants_to_end(tokens, n_logits=1, **options):
        logits = evaluate(tokens, n_logits, **options)
        if logits is None:
            return None
        logits = np.array(logits)
        for row in range(n_logits):
            predicts = len(tokens) - n_logits + row + 1  # the position this row's token would take
            if predicts >= stop_at:
                logits[row, eot] = logits[row].max() + 1.0
        return logits

    monkeypatch.setattr(gemma_engine.target, "eval", wants_to_end)
    for mode in (DrafterMode.OFF, DrafterMode.LOOKUP):
        tokens, _, done = run(gemma_engine, COPY, SpecParams(mode=mode, draft_length=8))
        assert done.finish_reason == FinishReason.STOP
        assert done.stats.n_tokens == 5 and eot not in [t.token for t in tokens]


def test_sampling_at_a_262k_vocabulary(gemma_engine, capsys):
    """The sampling paths at Gemma's vocabulary size: valid, and their Python time reported."""
    logits = np.array(gemma_engine.target.eval(gemma_engine.prompt_tokens(COPY), 1)[0])
    assert logits.shape == (262_144,)
    rng = make_rng(7)
    timings = {}
    for name, params in (
        ("default (top-k 40, top-p 0.95, min-p 0.05)", SamplingParams()),
        ("top-p only (top-k off)", SamplingParams(top_k=0, min_p=0.0)),
        ("greedy", SamplingParams(temperature=0.0)),
    ):
        t0 = time.perf_counter()
        for _ in range(20):
            dist = distribution(logits, params)
            token = dist.sample(rng)
        timings[name] = (time.perf_counter() - t0) / 20
        assert 0 <= token < 262_144 and dist.prob_of(token) > 0
        assert abs(float(dist.probs.sum()) - 1.0) < 1e-4
    with capsys.disabled():
        print(
            "\nPython sampling per token at 262,144 tokens: "
            + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in timings.items())
        )
