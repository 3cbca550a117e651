"""Auto's choice over answers, without a model: a stand-in target (tests/test_drafters.py's RuleTarget),
fixed costs, and a draft model whose acceptance is scripted. Behaviour, never timings: which drafter
auto uses, in which rounds, what it carries to the next answer and across a restart, and that the
text never changes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.config import DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding import auto_memory
from engine.decoding.drafters import Draft, ModelDrafter, TrackerKey, _take
from engine.decoding.policy import ConfidenceCalibration, CostModel, FixedCosts, confidence_floor
from engine.decoding.speculator import EXPLORATION, PROBE_GAP, PROBE_SEEN, REPROBE_ROUNDS, Speculator
from tests.test_drafters import RuleTarget, answer, follow

AUTO = SpecParams(mode=DrafterMode.AUTO, history=False)
PLAIN = SpecParams(mode=DrafterMode.OFF)
LONG = SamplingParams(temperature=0.0, max_tokens=480)  # room for 12 full drafts of 31 and more
GPU = {1: 0.010, 2: 0.0102, 4: 0.0105, 8: 0.011}  # verifying 8 tokens costs about one step
CPU = {1: 0.010, 2: 0.020, 4: 0.040, 8: 0.080}  # verifying n tokens costs n steps
# A 2-core Xeon's (engine.bench --costs frozen): verifying 2, 4, 8 tokens 1.41, 1.58, 2.84 steps; a draft step 0.50.
XEON = {1: 0.0706, 2: 0.0993, 4: 0.1117, 8: 0.2002, 16: 0.2846, 32: 0.5356}


class ScriptedDraft(ModelDrafter):
    """A draft model whose tokens are right while right(round) says so; auto's prior for it is low."""

    kind = DrafterKind.DRAFT_MODEL
    source = TokenSource.DRAFT_MODEL
    modes = frozenset({DrafterMode.AUTO, DrafterMode.DRAFT_MODEL})
    PRIORS = {None: (0.1, 0.1)}  # "a draft model for another kind of text": not worth it, a priori

    def __init__(self, step_s: float, right=lambda n: True, sure=lambda n: 1000):
        """right(round): its tokens are the target's; sure(round): how many tokens it is sure of, after
        which it takes one more step and, too unsure of that token, stops (a real one's confidence)."""
        super().__init__()
        self.step, self.right, self.sure, self.rounds_drafted = step_s, right, sure, 0

    def extend(self, draft: Draft, context, sampling, rng, p_min) -> None:
        right, sure = self.right(self.rounds_drafted), self.sure(self.rounds_drafted)
        self.rounds_drafted += 1
        token = context[-1]
        for _ in range(draft.draft_length):
            draft.n_steps += 1
            if len(draft) == sure:
                break
            token = follow(token) if right else follow(token) % 31 + 1  # RuleTarget's vocabulary: 1..31
            draft.tokens.append(token)
            draft.p_draft.append(None)
            draft.confidence.append(1.0)

    def measured_step_s(self, costs):
        return self.step

    def observe_step(self, costs, seconds):
        pass


def speculator(costs: dict, draft: ScriptedDraft) -> Speculator:
    """RuleTarget's answers repeat every few tokens: lookup is left out, so the draft model is on its own."""
    s = Speculator(RuleTarget(), costs=FixedCosts(costs))
    s.drafters = [draft]
    return s


class RecitingTarget(RuleTarget):
    """A target that recites a text after its prompt, whatever it is fed: row i's argmax is the text's
    token at i + 1 - len(prompt), then its end-of-generation token (0)."""

    n_vocab = 64

    def __init__(self, prompt_length: int, text: list[int]):
        super().__init__()
        self.prompt_length, self.text = prompt_length, text

    def eval(self, tokens, n_logits=1, checkpoint=None, width=0):
        self.last_decoded = len(tokens)
        if n_logits == 0:
            return None
        logits = np.zeros((n_logits, self.n_vocab), dtype=np.float32)
        for row, position in enumerate(range(len(tokens) - n_logits, len(tokens))):
            j = position + 1 - self.prompt_length
            logits[row, self.text[j] if 0 <= j < len(self.text) else 0] = 10.0
        return logits


def rounds_by(done, kind: DrafterKind) -> list[int]:
    return [i for i, r in enumerate(done.stats.rounds) if r.drafter == kind]


def test_auto_discovers_a_draft_model_whose_prior_was_low_within_a_few_probes():
    draft = ScriptedDraft(step_s=0.0005)  # every token right, its step cheap: it pays on this GPU
    s = speculator(GPU, draft)
    _, plain = answer(s, PLAIN, LONG)
    _, done = answer(s, AUTO, LONG)
    used = rounds_by(done, DrafterKind.DRAFT_MODEL)
    # Probes from the second round on, PROBE_GAP apart, then auto's own choice from the evidence.
    assert used and used[0] == 1
    assert used[PROBE_SEEN - 1] <= 1 + (PROBE_SEEN - 1) * PROBE_GAP
    tail = done.stats.rounds[used[PROBE_SEEN - 1] + 1 :]
    assert tail[:-1] and all(r.drafter == DrafterKind.DRAFT_MODEL for r in tail[:-1])  # the last: 1 token left
    assert done.text == plain.text  # lossless throughout
    assert max(r.draft_length for r in tail) >= 4  # full acceptance on a GPU: long drafts


def test_a_draft_model_that_could_not_pay_even_if_always_right_is_never_probed():
    # A CPU where a draft step costs 0.6 of a target step and verifying n tokens n steps.
    s = speculator(CPU, ScriptedDraft(step_s=0.006))
    _, done = answer(s, AUTO, LONG)
    assert rounds_by(done, DrafterKind.DRAFT_MODEL) == []


def test_auto_gives_up_on_a_draft_model_that_stopped_paying_and_probes_it_rarely():
    draft = ScriptedDraft(step_s=0.0005, right=lambda n: n < 12)  # right for 12 rounds, then never
    s = speculator(GPU, draft)
    _, plain = answer(s, PLAIN, LONG)
    _, done = answer(s, AUTO, LONG)
    used = rounds_by(done, DrafterKind.DRAFT_MODEL)
    rounds = len(done.stats.rounds)
    wrong = [i for i in used if done.stats.rounds[i].accepted == 0]
    # Its estimate falls with each wrong round (MEMORY); at these costs even a third of its first
    # tokens would pay, so it takes a dozen rounds to stop; then it is tried only as a probe.
    assert 1 <= len(wrong) <= 16 + rounds // REPROBE_ROUNDS
    late = [i for i in used if i > used[11] + 20]
    assert len(late) <= 1 + rounds // REPROBE_ROUNDS
    assert done.text == plain.text


def test_a_draft_model_sure_of_one_token_at_a_time_is_priced_by_what_its_rounds_yield():
    """Greedy, a draft model ends its own rounds where it is unsure. At the Xeon's costs a round of 8
    sure and right tokens (9 steps) pays; a round of 1 (2 steps, the second unsure) never does, though
    every drafted token is accepted: 2 tokens for 2 draft steps and a verification of 2, against 2 steps.
    After an answer of long runs, auto stops using it within a few rounds of short ones (its rates alone,
    first token always accepted and the next ones as before, would keep it drafting)."""
    draft = ScriptedDraft(step_s=0.035, sure=lambda n: 8)
    s = speculator(XEON, draft)
    _, plain = answer(s, PLAIN, LONG)
    _, long_runs = answer(s, AUTO, LONG)
    used = rounds_by(long_runs, DrafterKind.DRAFT_MODEL)
    assert len(used) >= len(long_runs.stats.rounds) * 3 // 4 and long_runs.text == plain.text
    assert all(r.drafted == r.accepted == 8 for r in long_runs.stats.rounds[used[0] : -1] if r.drafted)

    draft.sure = lambda n: 1
    _, short_runs = answer(s, AUTO, LONG)
    used = rounds_by(short_runs, DrafterKind.DRAFT_MODEL)
    assert all(short_runs.stats.rounds[i].accepted == 1 for i in used)
    assert 1 <= len(used) <= 8 + len(short_runs.stats.rounds) // REPROBE_ROUNDS  # then plain, and rare probes
    assert short_runs.text == plain.text


def test_a_quote_of_the_prompt_is_drafted_in_long_runs_as_soon_as_it_shows():
    """The answer quotes a 40-token passage of the prompt. At CPU-like costs (one more verified token
    costs a third of a step), auto drafts from lookup from the first round it may, and longer runs as
    the match grows, by its band's prior: 2 tokens from 8 matched, 3 (the best here) from 16."""
    passage = list(range(20, 60))
    prompt = [10, 11, *passage, 12]
    s = Speculator(RecitingTarget(len(prompt), passage), costs=FixedCosts({1: 0.037, 2: 0.050, 4: 0.082, 8: 0.180}))
    events = list(s.stream(prompt, SamplingParams(temperature=0.0, max_tokens=60), AUTO))
    done = events[-1]
    rounds = done.stats.rounds
    assert done.text == "".join(f"t{t} " for t in passage)
    assert all(r.drafter == DrafterKind.LOOKUP for r in rounds[1:])
    n_answer = np.cumsum([r.accepted + 1 for r in rounds])  # the answer's length after each round
    for matched, length in ((8, 2), (16, 3)):
        long_match = [r for r, before in zip(rounds[1:], n_answer, strict=False) if before >= matched]
        assert long_match[:-1] and all(r.draft_length >= length for r in long_match[:-1])  # the last: the end
    assert all(r.accepted == r.drafted for r in rounds[:-1])
    assert len(rounds) <= 16  # plain decoding takes 41


def test_what_auto_learned_carries_to_the_next_answer_and_across_a_restart(tmp_path):
    s = speculator(GPU, ScriptedDraft(step_s=0.0005))
    _, first = answer(s, AUTO, LONG)
    assert rounds_by(first, DrafterKind.DRAFT_MODEL)[0] == 1  # a probe: it knew nothing yet
    # The next answer: no probing needed, the draft model from the first round it may draft.
    _, second = answer(s, AUTO, LONG)
    assert all(r.drafter == DrafterKind.DRAFT_MODEL for r in second.stats.rounds[1:-1])  # the last: 1 token left

    file = tmp_path / "auto_memory.json"
    key = auto_memory.pair_key("target.gguf", "draft.gguf", "CPU")
    auto_memory.save(file, key, s.memory())
    restarted = speculator(GPU, ScriptedDraft(step_s=0.0005))
    restarted.recall(auto_memory.load(file, key))
    tracker = restarted.tracker(TrackerKey(DrafterKind.DRAFT_MODEL))
    assert tracker.seen >= PROBE_SEEN and tracker.first_rate > 0.75
    assert (
        restarted.drafter(DrafterKind.DRAFT_MODEL).shape.counts() == s.drafter(DrafterKind.DRAFT_MODEL).shape.counts()
    )
    _, after = answer(restarted, AUTO, LONG)
    assert all(r.drafter == DrafterKind.DRAFT_MODEL for r in after.stats.rounds[1:-1])
    assert after.text == first.text == second.text
    # Another pair starts from its priors.
    assert auto_memory.load(file, auto_memory.pair_key("target.gguf", None, "CPU")) == {}


def test_a_damaged_or_foreign_memory_file_means_starting_from_the_priors(tmp_path):
    file = tmp_path / "auto_memory.json"
    key = auto_memory.pair_key("t.gguf", "d.gguf", "CPU")
    for content in (b"\x00\xff not json", b"[1, 2]", b'{"version": 99, "pairs": {}}'):
        file.write_bytes(content)
        assert auto_memory.load(file, key) == {}
    # Malformed entries inside a good file are skipped, the rest is taken.
    file.write_text(
        json.dumps(
            {
                "version": auto_memory.VERSION,
                "pairs": {
                    key: {
                        "draft-model": {"-": {"first": [3, "x"], "next": [1, 1]}},
                        "lookup": {"16": {"first": [4.0, 0.0], "next": [30.0, 1.0], "seen": 4}, "abc": {}},
                        "no-such-drafter": {"-": {"first": [1, 1], "next": [1, 1]}},
                    }
                },
            }
        )
    )
    s = Speculator(RuleTarget(), costs=FixedCosts(GPU))
    s.drafters.append(ScriptedDraft(step_s=0.0005))
    s.recall(auto_memory.load(file, key))
    assert s.tracker(TrackerKey(DrafterKind.DRAFT_MODEL)).seen == 0  # left at its prior
    assert s.tracker(TrackerKey(DrafterKind.LOOKUP, 16)).seen == 4
    # Saving over a damaged file replaces it with a good one.
    file.write_bytes(b"\x00")
    auto_memory.save(file, key, s.memory())
    assert auto_memory.load(file, key)["lookup"]["16"]["seen"] == 4


def test_a_greedy_model_drafter_stops_where_its_whole_run_is_no_longer_likely():
    """The adaptive floor holds the chance that every token so far is accepted (the product of the
    model's confidences), since a token after a rejected one is wasted; a user's p_min, each token."""
    logits = np.log(np.array([0.7, 0.1, 0.1, 0.1], dtype=np.float32))  # 70 % sure of token 0, every step
    rng = np.random.default_rng(0)
    greedy = SamplingParams(temperature=0.0)
    for joint, expected in ((True, 2), (False, 5)):
        draft = Draft(DrafterKind.DRAFT_MODEL, 5, joint_floor=joint)
        while len(draft) < 5 and _take(draft, logits, greedy, rng, p_min=0.4):
            pass
        # joint: 0.7, then 0.49, then 0.34 < 0.4 stops; per token: 0.7 >= 0.4 every time.
        assert len(draft) == expected and draft.confidence[0] == pytest.approx(0.7, abs=1e-5)


def test_a_joint_floor_corrects_the_product_of_the_confidences_by_how_well_it_has_predicted():
    """A draft's expected accepted run is the sum of its joint confidences: a model whose runs were
    accepted 80 % as far as those sums said has its product corrected by 0.8."""
    logits = np.log(np.array([0.95, 0.02, 0.02, 0.01], dtype=np.float32))
    rng = np.random.default_rng(0)
    greedy = SamplingParams(temperature=0.0)
    for trust, expected in ((1.0, 13), (0.8, 9)):
        draft = Draft(DrafterKind.DRAFT_MODEL, 16, joint_floor=True, trust=trust)
        while len(draft) < 16 and _take(draft, logits, greedy, rng, p_min=0.5):
            pass
        # trusted: 0.95**13 = 0.513 >= 0.5 > 0.95**14; corrected: 0.8 * 0.95**9 = 0.504, 0.8 * 0.95**10 = 0.479.
        assert len(draft) == expected


def test_the_joint_calibration_sees_a_model_sure_of_runs_it_gets_wrong_early():
    """Sure of each of 8 tokens (0.95) and right about the first only: token by token it looks half
    right, but its runs' products promised 6.4 tokens for every 1 accepted."""
    sure_and_wrong, honest = ConfidenceCalibration(), ConfidenceCalibration()
    for _ in range(20):
        sure_and_wrong.observe([0.95] * 8, 1)
        honest.observe([0.9, 0.5, 0.5], 1)  # its products promised 0.9 + 0.45 + 0.225 = 1.575; it gets 1
    assert sure_and_wrong.joint_ratio < 0.25 < 0.45 < sure_and_wrong.ratio
    assert 0.6 < honest.joint_ratio < 0.7


def test_the_floor_values_time_at_the_rate_the_answer_is_going():
    """To maximise tokens per second, one more token must be likelier than its time times the rate the
    round gives: at three times plain decoding's rate the floor is three times as high."""
    costs = CostModel({1: 0.010, 2: 0.0101, 4: 0.0103, 8: 0.0107}, draft_step_s=0.001)
    plain = confidence_floor(costs, 4, costs.draft_step_s)
    assert plain == pytest.approx(0.2)  # the lowest floor there is: (0.001 + 0.0001) / 0.010 = 0.11
    assert confidence_floor(costs, 4, costs.draft_step_s, rate=3 / costs.step_s) == pytest.approx(0.33, abs=0.01)
    assert confidence_floor(costs, 4, costs.draft_step_s, rate=0.5 / costs.step_s) == plain  # never below plain's


def test_engine_info_says_what_auto_learned_in_words():
    memory = {
        "draft": {
            "-": {
                "first": [3.0, 1.0],
                "next": [9.0, 1.0],
                "seen": 5,
                "rounds": {"lengths": {"2": 1.0, "4": 1.0}, "steps": 8.0, "accepted": 5.0, "all": 1.0},
            }
        },
        "lookup": {
            "16": {"first": [1.0, 0.0], "next": [4.0, 0.0], "seen": 1},
            "2": {"first": "?"},
            "4": {"first": [1.0, 0.0], "next": [0.0, 0.0], "seen": 1},
            "8": {"first": [0.0, 0.0], "next": [0.0, 0.0], "seen": 0},  # never seen: not listed
        },
        "context": {"attention_s": 6e-6},
    }
    assert auto_memory.describe(memory) == [
        "context: each token of context adds 6.0 µs a verified token (after 1,000 tokens of context: a step "
        "6 ms more, verifying 16 tokens 96 ms more)",
        "draft: first token accepted 0.75, the next ones 0.90 (seen in 5 rounds)",
        "draft at temperature 0: 3.0 tokens drafted a round in 4.0 steps, 2.5 accepted",
        "lookup (matches of 4+ tokens): first token accepted 1.00, the next ones not yet seen (seen in 1 round)",
        "lookup (matches of 16+ tokens): first token accepted 1.00, the next ones 1.00 (seen in 1 round)",
    ]
    assert auto_memory.describe({"context": {"attention_s": "?"}}) == []


class DraftBehind(ScriptedDraft):
    """A draft model that has not seen the conversation: `lag` tokens to evaluate, at a millisecond each,
    before its first draft (then it keeps up)."""

    def __init__(self, step_s: float, lag: int):
        super().__init__(step_s)
        self.lag = lag

    def behind(self, context) -> int:
        return self.lag

    def catch_up_cost(self, costs, n_tokens: int) -> float:
        return n_tokens * 0.001

    def extend(self, draft: Draft, context, sampling, rng, p_min) -> None:
        draft.caught_up, self.lag = self.lag, 0
        super().extend(draft, context, sampling, rng, p_min)


def test_a_draft_model_behind_a_long_prompt_is_caught_up_only_where_the_answer_can_repay_it():
    # Always right and cheap on a GPU, but 200 ms of catching up first (a new prompt, a tool result).
    short = SamplingParams(temperature=0.0, max_tokens=20)
    draft = DraftBehind(step_s=0.0005, lag=200)
    _, done = answer(speculator(GPU, draft), AUTO, short)
    assert rounds_by(done, DrafterKind.DRAFT_MODEL) == [] and draft.lag == 200  # 10 ms a token: never repaid
    draft = DraftBehind(step_s=0.0005, lag=200)
    _, done = answer(speculator(GPU, draft), AUTO, LONG)
    used = rounds_by(done, DrafterKind.DRAFT_MODEL)
    assert used and draft.lag == 0 and len(used) >= len(done.stats.rounds) // 2  # repaid over a long answer
    draft = DraftBehind(step_s=0.0005, lag=5000)  # 5 s: more than any answer of HORIZON tokens repays
    _, done = answer(speculator(GPU, draft), AUTO, LONG)
    assert rounds_by(done, DrafterKind.DRAFT_MODEL) == []


def test_a_draft_model_judged_not_to_pay_is_probed_again_only_where_the_answer_so_far_repays_its_catch_up():
    """Every answer is a new prompt the draft model must first evaluate (200 ms here, 20 steps). Once
    judged wrong, it is probed again after REPROBE_ROUNDS unused rounds only where that probe costs at
    most EXPLORATION of the answer so far: in a long answer, late; never in its first rounds, where a
    short answer would pay for it all."""
    draft = DraftBehind(step_s=0.0005, lag=200)
    draft.right = lambda n: False
    s = speculator(GPU, draft)
    _, first = answer(s, AUTO, LONG)
    probes = rounds_by(first, DrafterKind.DRAFT_MODEL)  # caught up, it is probed every REPROBE_ROUNDS
    assert len(probes) >= PROBE_SEEN and all(first.stats.rounds[i].accepted == 0 for i in probes)
    probe_s = 0.200  # the catch-up alone (the probe round adds a little)
    for _ in range(3):
        draft.lag = 200  # the next conversation
        _, done = answer(s, AUTO, LONG)
        probes = rounds_by(done, DrafterKind.DRAFT_MODEL)
        assert probes and probes[0] >= probe_s / (EXPLORATION * GPU[1]) - 1  # about 410 rounds in
        assert draft.lag == 0 and done.text == first.text
    draft.lag = 200
    _, short = answer(s, AUTO, SamplingParams(temperature=0.0, max_tokens=100))
    assert rounds_by(short, DrafterKind.DRAFT_MODEL) == [] and draft.lag == 200
