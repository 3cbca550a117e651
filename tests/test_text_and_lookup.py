"""Prompt lookup, UTF-8 streaming, stop strings, and the cost model (pure, no model)."""

import pytest

from engine.chat.textstream import TextStream
from engine.config import DrafterKind
from engine.decoding.lookup import NgramIndex
from engine.decoding.policy import AcceptanceTracker, CostModel, best_choice, draft_confidence_floor, expected_tokens


def test_lookup_continues_the_most_recent_occurrence_of_the_longest_ngram():
    index = NgramIndex(1, 3)
    history = [1, 2, 3, 4, 5, 9, 2, 3, 7, 1, 2, 3]
    # "1 2 3" occurred at the start, followed by 4 5 9; "2 3" last occurred followed by 7.
    assert index.propose(history, 3) == [4, 5, 9]
    assert index.last_match_length == 3  # the start of history: nothing further back


def test_lookup_falls_back_to_shorter_ngrams_and_to_nothing():
    index = NgramIndex(1, 3)
    assert index.propose([5, 6, 7, 8, 6], 2) == [7, 8]
    assert index.last_match_length == 1
    assert index.propose([1, 2, 3], 2) == []
    assert index.last_match_length == 0


def test_a_lookup_match_is_followed_back_beyond_its_ngram():
    """A quote: the answer's last 12 tokens stand in the prompt, so the match is 12 long, not 4."""
    passage = list(range(100, 140))
    index = NgramIndex(1, 4)
    history = [7, 8] + passage + [9, 9] + passage[:12]
    assert index.propose(history, 3) == passage[12:15]
    assert index.last_match_length == 12
    long_quote = [7] + passage + [9] + passage[:39]
    index.propose(long_quote, 1)
    assert index.last_match_length == 32  # followed at most MAX_MATCH back


def test_lookup_says_how_often_the_matched_ngram_went_on_as_proposed():
    """An n-gram that went on three ways is a poorer bet than one that always went on alike."""
    index = NgramIndex(1, 1)
    assert index.propose([5, 1, 5, 2, 5, 3, 5, 1, 5], 1) == [1]  # the latest of 5's followers
    assert index.last_share == pytest.approx(2 / 4)  # 5 went on with 1 twice, with 2 and 3 once each
    assert index.propose([5, 1, 7, 5, 1, 7, 5], 2) == [1, 7]
    assert index.last_share == 1.0  # rebuilt for a history that is not an extension: 5 always went on with 1
    assert index.propose([5, 1, 7, 5, 1, 7, 5, 8, 5], 1) == [8]  # extended: the counts grow with it
    assert index.last_share == pytest.approx(1 / 3)
    assert index.propose([4, 6], 1) == [] and index.last_share == 0.0


def test_lookup_index_follows_an_edited_history():
    index = NgramIndex(1, 2)
    assert index.propose([1, 2, 3, 1], 2) == [2, 3]
    index.propose([1, 2, 3, 1, 2], 2)  # extension: incremental
    assert index.propose([9, 8, 7, 9], 2) == [8, 7]  # not an extension: rebuilt


def test_multibyte_characters_split_across_tokens_come_out_whole():
    text = "猫は🐈です"
    data = text.encode()
    stream = TextStream()
    pieces = [stream.push(i, data[i : i + 1], None) for i in range(len(data))]
    texts = [p.text for ps in pieces for p in ps]
    assert "".join(texts) == text
    assert all("\ufffd" not in t for t in texts)
    assert texts[0] == "" and texts[2] == "猫"  # held until the third byte arrives


def test_stop_string_is_cut_and_never_shown():
    stream = TextStream(stop=["</end>"])
    shown = []
    for i, chunk in enumerate(["Hello ", "wor", "ld</", "en", "d> more"]):
        shown += [p.text for p in stream.push(i, chunk.encode(), None)]
        assert "</" not in "".join(shown)
        if stream.stopped:
            break
    assert stream.stopped and "".join(shown) == "Hello world" == stream.text


def test_partial_stop_string_is_released_when_it_turns_out_not_to_be_one():
    stream = TextStream(stop=["STOP"])
    shown = [p.text for p in stream.push(0, b"ST", None)]
    assert shown == []
    shown += [p.text for p in stream.push(1, b"AR", None)]
    assert "".join(shown) == "STAR" and not stream.stopped


def test_expected_tokens_per_round():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_policy_drafts_nothing_when_verification_costs_k_steps():
    # A CPU where verifying n tokens costs n steps: no drafter below certainty can pay.
    cpu = CostModel({1: 0.037, 2: 0.074, 4: 0.148, 8: 0.296}, draft_step_s=0.022)
    choice = best_choice(cpu, {"draft": (0.8, 8), "lookup": (0.8, 8)})
    assert choice.drafter == DrafterKind.NONE and choice.draft_length == 0


def test_policy_drafts_long_on_a_gpu_where_width_is_free():
    gpu = CostModel({1: 0.010, 2: 0.0101, 4: 0.0102, 8: 0.0105}, draft_step_s=0.001)
    choice = best_choice(gpu, {"draft": (0.8, 16)})
    assert choice.drafter == DrafterKind.DRAFT_MODEL and choice.draft_length >= 4


def test_policy_prefers_cheap_lookup_when_it_is_accepted():
    costs = CostModel({1: 0.037, 2: 0.050, 4: 0.082, 8: 0.180}, draft_step_s=0.022)
    assert best_choice(costs, {"lookup": (0.9, 8), "draft": (0.9, 8)}).drafter == "lookup"
    assert best_choice(costs, {"lookup": (0.1, 8)}).drafter == "none"


def test_user_chosen_drafter_still_drafts_when_it_does_not_pay():
    costs = CostModel({1: 0.037, 2: 0.074})
    choice = best_choice(costs, {"lookup": (0.1, 3)}, allow_none=False, fixed_k=True)
    assert (choice.drafter, choice.draft_length) == (DrafterKind.LOOKUP, 3)


def test_acceptance_tracker_learns_and_forgets():
    t = AcceptanceTracker()
    for _ in range(10):
        t.observe(4, 4)
    assert t.first_rate > 0.85 and t.next_rate > 0.9
    for _ in range(40):
        t.decay()
    assert abs(t.first_rate - 0.5) < 0.1  # back near the prior: worth trying again


def test_acceptance_tracker_separates_the_first_token_from_continuations():
    """Copying: the first lookup token is often wrong, but once one is right the run continues."""
    t = AcceptanceTracker()
    for _ in range(6):
        t.observe(8, 0)
        t.observe(8, 8)
    assert t.first_rate < 0.6 and t.next_rate > 0.9
    # One rate would say ~0.9 per token; two say a run is worth drafting long once it starts.
    assert expected_tokens(t.rates, 8) > expected_tokens(t.first_rate, 8)


def test_draft_confidence_floor_is_high_when_drafting_is_costly():
    cpu = CostModel({1: 0.037, 2: 0.050, 4: 0.082}, draft_step_s=0.022)
    gpu = CostModel({1: 0.010, 2: 0.0101, 4: 0.0102}, draft_step_s=0.001)
    assert draft_confidence_floor(cpu, 1) > 0.8
    assert draft_confidence_floor(gpu, 1) < 0.3


def test_an_overconfident_draft_model_gets_a_higher_stopping_threshold():
    from engine.decoding.policy import ConfidenceCalibration

    costs = CostModel({1: 0.010, 2: 0.011, 4: 0.013}, draft_step_s=0.002)
    honest, overconfident = ConfidenceCalibration(), ConfidenceCalibration()
    for _ in range(20):
        honest.observe([0.9, 0.9, 0.9, 0.9], 3)  # sure and mostly right
        overconfident.observe([0.95, 0.95, 0.95, 0.95], 0)  # sure and wrong
    assert honest.ratio > 0.7 and overconfident.ratio < 0.2
    assert draft_confidence_floor(costs, 2, overconfident) > draft_confidence_floor(costs, 2, honest)


def test_cost_model_shrugs_off_a_spike_and_stays_monotone():
    costs = CostModel({1: 0.030, 2: 0.040, 4: 0.070, 8: 0.120})
    costs.observe_verify(1, 0.300)  # another program took the cores for a moment
    assert costs.step_s == pytest.approx(0.165)  # median of two: not yet robust...
    for _ in range(4):
        costs.observe_verify(1, 0.031)
    assert costs.step_s == pytest.approx(0.031)  # ...but a few normal steps outvote it
    costs.observe_verify(2, 0.010)  # a noisy, impossibly cheap wide batch
    costs.observe_verify(2, 0.010)
    assert costs.verify_s(2) >= costs.verify_s(1)
    assert costs.verify_s(3) == pytest.approx((costs.verify_s(2) + costs.verify_s(4)) / 2)
    assert costs.verify_s(16) > costs.verify_s(8)
