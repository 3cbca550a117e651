"""Reasoning blocks: <think>…</think> split off the answer as the text streams."""

import pytest

from engine.chat.reasoning import ReasoningSplitter
from engine.chat.textstream import Piece
from engine.config import ChatMessage, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent


def split(chunks, **kwargs):
    splitter = ReasoningSplitter(**kwargs)
    parts = [p for i, c in enumerate(chunks) for p in splitter.push(Piece(i, c, "target"))] + splitter.finish()
    thinking = "".join(p.piece.text for p in parts if p.reasoning)
    answer = "".join(p.piece.text for p in parts if not p.reasoning)
    return thinking, answer, splitter


@pytest.mark.parametrize(
    "chunks",
    [
        ["<think>", "\n", "Two and two", " make four.", "\n", "</think>", "\n\n", "It is", " 4."],
        ["<th", "ink>\nTwo and two make four.\n</", "think", ">\n\nIt is 4."],  # markers split across tokens
        ["<think>\nTwo and two make four.\n</think>\n\nIt is 4."],  # all in one piece (a whole accepted draft)
        ["  <", "think>", "Two and two make four.</think>It is 4."],
    ],
)
def test_the_thinking_is_split_off_wherever_the_markers_fall(chunks):
    thinking, answer, splitter = split(chunks)
    assert thinking.strip() == "Two and two make four."
    assert answer == "It is 4."
    assert splitter.entered and splitter.answering


@pytest.mark.parametrize("thinking", [False, True])
def test_a_token_with_no_text_yet_is_passed_over(thinking):
    """A token that ends inside a UTF-8 character comes as an empty piece; holding it made the
    release loop spin forever (an answer that never ended, seen at temperature 0.8)."""
    import threading

    splitter = ReasoningSplitter(thinking=thinking)
    parts = []
    worker = threading.Thread(
        target=lambda: parts.extend(splitter.push_all([Piece(1, "a", None), Piece(2, "", None), Piece(3, "é", None)])),
        daemon=True,
    )
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "the splitter never returned"
    assert "".join(p.piece.text for p in parts) + "".join(p.piece.text for p in splitter.finish()) == "aé"


def test_no_marker_at_the_start_means_no_thinking():
    assert split(["Use ", "<think>", " tags"])[:2] == ("", "Use <think> tags")
    assert split(["<", "b>bold</b>"])[:2] == ("", "<b>bold</b>")
    assert split(["\n", "Hi"])[:2] == ("", "\nHi")


def test_a_prompt_that_opens_the_thinking_starts_inside_it():
    thinking, answer, _ = split(["Let me see.", "</think>", "4"], thinking=True)
    assert (thinking, answer) == ("Let me see.", "4")


def test_thinking_that_never_ends_is_all_thinking():
    thinking, answer, splitter = split(["<think>", "and on", " </thi"])
    assert (thinking, answer) == ("and on </thi", "") and splitter.n_reasoning_tokens == 3


# SmolLM2 thinks aloud when an earlier answer in the conversation did (its template keeps the
# thinking of earlier turns): it copies the earlier block, so prompt lookup drafts it, markers included.
THOUGHT = [
    ChatMessage("user", "What is 2+2? Think first."),
    ChatMessage("assistant", "The answer is 4.", reasoning="I add 2 and 2, which makes 4."),
    ChatMessage("user", "What is 2+2? Think first."),
]


def test_a_real_model_streams_its_thinking_apart_even_inside_accepted_drafts(small_engine, monkeypatch):
    verified = []  # the draft tokens each verification carried
    evaluate = small_engine.target.eval

    def recording_eval(tokens, n_logits=1, **options):
        if n_logits:
            verified.append(list(tokens[len(tokens) - n_logits + 1 :]))
        return evaluate(tokens, n_logits, **options)

    monkeypatch.setattr(small_engine.target, "eval", recording_eval)
    events = list(
        small_engine.chat(THOUGHT, SamplingParams(temperature=0.0, max_tokens=64), SpecParams(mode=DrafterMode.LOOKUP))
    )
    monkeypatch.undo()
    done = events[-1]
    assert isinstance(done, DoneEvent)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert done.reasoning and done.text, "the model thought, then answered"
    assert "<think>" not in done.text + done.reasoning and "</think>" not in done.text + done.reasoning
    assert "".join(t.text for t in tokens if t.reasoning).strip() == done.reasoning
    assert "".join(t.text for t in tokens if not t.reasoning) == done.text
    # A marker's tokens (<think> is three here) came from prompt lookup, inside a draft the target accepted.
    piece = small_engine.target.piece
    accepted = [
        b"".join(piece(t) for t in draft[: r.round.accepted])
        for draft, r in zip(verified[-len(rounds) :], rounds, strict=True)
    ]
    assert any(b"think>" in text for text in accepted), "no marker inside an accepted draft"
    assert any(t.source == TokenSource.LOOKUP for t in tokens if not t.reasoning)
    # The thinking counts in the statistics.
    s = done.stats
    assert 0 < s.n_reasoning_tokens < s.n_tokens and 0 < s.reasoning_s <= s.gen_s
    # Plain decoding thinks and answers the same.
    plain = list(
        small_engine.chat(THOUGHT, SamplingParams(temperature=0.0, max_tokens=64), SpecParams(mode=DrafterMode.OFF))
    )[-1]
    assert (plain.reasoning, plain.text) == (done.reasoning, done.text)


def test_thinking_is_not_sent_back_when_the_template_drops_it(small_engine):
    formatter = small_engine.formatter
    kept = formatter.format(THOUGHT)
    assert formatter.keeps_reasoning and "I add 2 and 2" in kept
    # A template that drops earlier thinking (as Qwen 3's and DeepSeek-R1's do).
    drops = (
        "{% for m in messages %}{% set c = m['content'] %}{% if '</think>' in c %}"
        "{% set c = c.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + c + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    small_engine.set_chat_template(drops)
    try:
        assert not small_engine.formatter.keeps_reasoning
        text = small_engine.formatter.format(THOUGHT)
        assert "I add 2 and 2" not in text and "The answer is 4." in text
    finally:
        small_engine.set_chat_template(None)
