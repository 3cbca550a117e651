"""A round of speculation as a record, and the one accounting of it that the engine's final
statistics and the app's live ones share: old stored rounds load, what is written keeps the stored
shape, the live estimate after the last round is the final one, the Details arithmetic adds up."""

import copy
import json
import re

import pytest

from app.core.answers import AnswerRecorder
from app.core.export import to_json
from app.core.figures import drafter_summary, estimate_text, speedup_text
from app.core.store import Store
from engine.config import ChatMessage, DrafterKind, DrafterMode, SamplingParams, SpecParams
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent
from engine.decoding.stats import AnswerStats, Round

# An answer's stats as the releases before the Round record stored them (AnswerStats.to_dict then):
# rounds as [drafter, k, drafted, accepted] lists, derived figures beside the fields.
OLD_STORED_STATS = {
    "n_prompt_tokens": 31,
    "n_prompt_evaluated": 31,
    "n_tokens": 9,
    "n_rounds": 4,
    "n_drafted": 7,
    "n_accepted": 5,
    "accepted_hist": {"1": 1, "4": 1},
    "rounds": [["none", 0, 0, 0], ["draft", 4, 4, 4], ["lookup", 3, 3, 1], ["none", 0, 0, 0]],
    "tokens_by_source": {"target": 4, "draft": 4, "lookup": 1},
    "ttft_s": 0.12,
    "prompt_s": 0.1,
    "gen_s": 0.4,
    "target_step_s": 0.05,
    "acceptance_rate": 5 / 7,
    "mean_accepted_length": 2.5,
    "prompt_tps": 310.0,
    "gen_tps": 22.5,
    "estimated_speedup": 1.125,
}
OLD_ROUNDS = [
    Round(DrafterKind.NONE, 0, 0, 0),
    Round(DrafterKind.DRAFT_MODEL, 4, 4, 4),
    Round(DrafterKind.LOOKUP, 3, 3, 1),
    Round(DrafterKind.NONE, 0, 0, 0),
]


def test_drafter_kind_is_its_stored_string():
    assert DrafterKind("lookup") is DrafterKind.LOOKUP and DrafterKind.DRAFT_MODEL == "draft"
    assert json.dumps([DrafterKind.NONE]) == '["none"]'
    assert {"draft": 1}[DrafterKind.DRAFT_MODEL] == 1


def test_old_stored_rounds_load_into_the_record_and_are_written_back_in_the_same_shape():
    stats = AnswerStats.from_dict(json.loads(json.dumps(OLD_STORED_STATS)))
    assert stats.rounds == OLD_ROUNDS
    assert all(isinstance(r.drafter, DrafterKind) for r in stats.rounds)
    written = json.loads(json.dumps(stats.to_dict()))
    assert written["rounds"] == OLD_STORED_STATS["rounds"]  # the stored schema is unchanged
    assert AnswerStats.from_dict(written) == stats
    # Any stored shape in field order, or by name, is read as the record.
    assert Round.of(("lookup", 3, 3, 1)) == Round.of(
        {"drafter": "lookup", "draft_length": 3, "drafted": 3, "accepted": 1}
    )
    with pytest.raises(ValueError):
        Round.of(["guess", 1, 1, 1])


def test_per_drafter_tallies_and_the_details_line_read_the_records():
    stats = AnswerStats.from_dict(OLD_STORED_STATS)
    tallies = stats.by_drafter()
    assert list(tallies) == [DrafterKind.NONE, DrafterKind.DRAFT_MODEL, DrafterKind.LOOKUP]
    assert (tallies[DrafterKind.LOOKUP].rounds, tallies[DrafterKind.LOOKUP].accepted) == (1, 1)
    assert tallies[DrafterKind.NONE].rounds == 2
    assert drafter_summary(stats).split("<br>") == [
        "draft model: 1 round, mean draft length 4.0, 4 of 4 drafted tokens accepted (100%)",
        "prompt lookup: 1 round, mean draft length 3.0, 1 of 3 drafted tokens accepted (33%)",
        "2 plain steps (nothing drafted)",
    ]
    # Allowed 8 and 15 tokens, lookup drafted one each time (its proposal ran into the end of the answer): the
    # share accepted is of the 2 tokens drafted, not of the 23 allowed, and the line says which it is.
    short = AnswerStats.from_dict(OLD_STORED_STATS | {"rounds": [["lookup", 8, 1, 1], ["lookup", 15, 1, 0]]})
    assert (
        drafter_summary(short)
        == "prompt lookup: 2 rounds, mean draft length 11.5, 1 of 2 drafted tokens accepted (50%)"
    )


def test_a_conversation_stored_by_an_older_release_opens_and_exports(tmp_path):
    path = tmp_path / "chats.sqlite3"
    store = Store(path)
    conv = store.create_conversation("Old")
    m = store.add_message(conv.id, "assistant", "nine tokens", complete=True)
    with store.db:  # the row exactly as the older release wrote it
        store.db.execute("UPDATE messages SET stats = ? WHERE id = ?", (json.dumps(OLD_STORED_STATS), m.id))
    store.close()
    again = Store(path)
    loaded = again.message(m.id)
    assert loaded.stats.rounds == OLD_ROUNDS
    exported = json.loads(to_json(conv, again.messages(conv.id)))
    assert exported["messages"][0]["stats"]["rounds"] == OLD_STORED_STATS["rounds"]
    again.close()


NUMBER = r"(\d+(?:\.\d+)?)"


def assert_details_arithmetic_adds_up(stats: AnswerStats) -> None:
    """The Details line's printed numbers give its printed result (to the precision printed)."""
    text = estimate_text(stats)
    plain, gen, result = re.search(rf"{NUMBER} s(?: \([^)]*\))? ÷ {NUMBER} s generating = {NUMBER}×", text).groups()
    # Each printed number is rounded: the result to 0.005, and plain and gen each to 0.0005 s, which moves
    # their ratio by up to 0.0005 / gen apiece (times the result, for gen).
    slack = 0.005 + (1.0 + float(result)) * 0.0005 / float(gen) + 1e-9
    assert abs(float(plain) / float(gen) - float(result)) <= slack, text
    assert f"{stats.estimated_speedup:.2f}" == result and speedup_text(stats) == f"≈{result}× vs plain (estimate)"
    fallback = re.search(rf"{NUMBER} tokens × {NUMBER} ms .* = {NUMBER} s", text)
    if fallback:  # an answer stored before rounds were priced: tokens × step = plain
        n, step_ms, total = (float(x) for x in fallback.groups())
        assert abs(n * step_ms / 1000 - total) <= 0.0005 + n * 0.00005, text


def test_details_arithmetic_of_an_old_answer_adds_up():
    stats = AnswerStats.from_dict(OLD_STORED_STATS)  # no priced rounds: tokens × the calibrated step
    assert "9 tokens × 50.0 ms" in estimate_text(stats)
    assert_details_arithmetic_adds_up(stats)
    # The figures issue 15 quoted ("393 tokens × 82.1 ms ÷ 34.67 s = 1.03×"): the arithmetic gives 0.93.
    quoted = AnswerStats(n_tokens=393, target_step_s=0.0821, gen_s=34.67)
    assert "= 0.93×" in estimate_text(quoted)
    assert_details_arithmetic_adds_up(quoted)


COPY = [
    ChatMessage(
        "user",
        "Repeat this list exactly, one item per line, and nothing else:\n"
        "apples\nbananas\ncherries\ndates\nelderberries\nfigs\ngrapes\nhoneydew melons\nkiwis\nlemons\n",
    )
]


YES = [ChatMessage("user", "Reply with just the word yes.")]


@pytest.mark.parametrize(
    ("messages", "spec"),
    [
        # SmolLM2 drafting for itself answers at length and ends inside a draft: the round that
        # ends the answer keeps fewer tokens than it accepted.
        (YES, SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=5, draft_p_min=0.0)),
        (COPY, SpecParams(mode=DrafterMode.LOOKUP)),
    ],
    ids=["draft-model", "lookup"],
)
def test_live_estimate_after_the_last_round_is_the_final_estimate(small_engine, tmp_path, messages, spec):
    """The app's live statistics, fed the engine's events as the window feeds them, equal the
    engine's final statistics once the last round is in: same rounds, same tokens, same estimate."""
    store = Store(tmp_path / "chats.sqlite3")
    conv = store.create_conversation("t")
    recorder = AnswerRecorder(store, store.add_message(conv.id, "assistant", complete=False), request_id=1)
    small_engine.reset_cache()
    events = list(small_engine.chat(messages, SamplingParams(temperature=0.0, max_tokens=64), spec))
    round_index, after_last_round = -1, None
    for event in events:
        if isinstance(event, RoundEvent):
            round_index += 1
            recorder.add_round(event)
            after_last_round = copy.deepcopy(recorder.live_stats())
        elif isinstance(event, TokenEvent):
            recorder.add_token(event.text, event.source.value, max(round_index, 0), event.reasoning)
    done = events[-1]
    assert isinstance(done, DoneEvent)
    final, live = done.stats, after_last_round
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert final.n_drafted > 0, "nothing was drafted: the test would not compare priced rounds"
    assert all(r.plain_s > 0 for r in rounds)
    assert final.plain_estimate_s == sum(r.plain_s for r in rounds) and final.gen_s == rounds[-1].gen_s
    assert live.rounds == final.rounds and live.n_tokens == final.n_tokens
    assert (live.n_drafted, live.n_accepted, live.accepted_hist) == (
        final.n_drafted,
        final.n_accepted,
        final.accepted_hist,
    )
    assert live.plain_s == final.plain_s and live.gen_s == final.gen_s
    assert live.estimated_speedup == final.estimated_speedup > 0
    assert speedup_text(live) == speedup_text(final) and estimate_text(live) == estimate_text(final)
    assert_details_arithmetic_adds_up(final)
    store.close()


def test_a_tool_turn_s_passes_add_up_to_one_answer_s_figures(small_engine):
    """The footer of an answer that called tools covers every pass of the model, not the last one."""
    greedy = SamplingParams(temperature=0.0, max_tokens=48)
    small_engine.reset_cache()
    first = list(small_engine.chat(COPY, greedy, SpecParams(mode=DrafterMode.LOOKUP)))[-1].stats
    second = list(small_engine.chat(YES, greedy, SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4)))[-1].stats
    assert first.n_drafted and second.n_drafted
    both = first.then(second)
    assert both.rounds == first.rounds + second.rounds and both.n_rounds == len(both.rounds)
    assert both.n_tokens == first.n_tokens + second.n_tokens
    assert (both.n_drafted, both.n_accepted) == (
        first.n_drafted + second.n_drafted,
        first.n_accepted + second.n_accepted,
    )
    assert sum(both.accepted_hist.values()) == sum(first.accepted_hist.values()) + sum(second.accepted_hist.values())
    assert sum(both.tokens_by_source.values()) == sum(first.tokens_by_source.values()) + sum(
        second.tokens_by_source.values()
    )
    assert both.estimated_speedup == pytest.approx((first.plain_s + second.plain_s) / (first.gen_s + second.gen_s))
    assert both.ttft_s == first.ttft_s and both.n_prompt_tokens == second.n_prompt_tokens
    assert_details_arithmetic_adds_up(both)
