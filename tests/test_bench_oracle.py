"""The benchmark's arithmetic, on hand-made rounds and runs (no model): the oracle is the best fixed
configuration, auto is judged against it, and the simulated GPU regime prices rounds by its formula
and is never moved by real timings."""

import json
import math

import pytest

from engine.bench import (
    Run,
    SimulatedGpuCosts,
    calibration_from,
    frozen_costs,
    geomean,
    oracle_choice,
    print_oracle_table,
    round_seconds,
    simulated_costs,
    simulated_rate,
    summarise,
)
from engine.config import DrafterKind
from engine.decoding.events import RoundEvent
from engine.decoding.policy import Calibration
from engine.decoding.stats import Round

STEP = 0.030  # 30 ms: ~33 tok/s plain


def event(
    drafter: DrafterKind,
    drafted: int,
    accepted: int,
    n_tokens: int | None = None,
    steps: int | None = None,
    caught_up=0,
) -> RoundEvent:
    n = accepted + 1 if n_tokens is None else n_tokens
    model = drafter in (DrafterKind.DRAFT_MODEL, DrafterKind.MTP)
    steps = (drafted if model else 0) if steps is None else steps
    return RoundEvent(Round(drafter, drafted, drafted, accepted), 0.0, 0.0, 0.0, 0.0, n, 0.0, steps, caught_up)


def plain_rounds(n: int) -> list[RoundEvent]:
    return [event(DrafterKind.NONE, 0, 0) for _ in range(n)]


def test_simulated_costs_follow_the_formula_and_ignore_real_timings():
    costs = SimulatedGpuCosts(STEP, draft=True, mtp=True)
    assert costs.step_s == pytest.approx(STEP)
    assert costs.verify_s(8) == pytest.approx(1.2 * STEP)
    assert costs.verify_s(5) == pytest.approx(STEP * (1 + 0.2 * 4 / 7))
    assert costs.verify_s(12) == pytest.approx(STEP * (1 + 0.2 * 11 / 7))  # beyond the calibrated widths too
    assert costs.draft_step_s == pytest.approx(0.1 * STEP)
    assert costs.mtp_step_s == pytest.approx(0.05 * STEP)
    costs.observe_verify(1, 10.0)
    costs.observe_verify(8, 10.0)
    costs.observe_draft_step(10.0)
    costs.observe_mtp_step(10.0)
    costs.observe_rollback(10.0)
    assert (costs.step_s, costs.verify_s(8)) == pytest.approx((STEP, 1.2 * STEP))
    assert (costs.draft_step_s, costs.mtp_step_s) == pytest.approx((0.1 * STEP, 0.05 * STEP))
    assert costs.round_overhead_s(3.0, 0.5) == 0.0
    assert costs.calibration().verify_s[8] == pytest.approx(1.2 * STEP)
    without = SimulatedGpuCosts(STEP, draft=False)
    assert without.draft_step_s is None and without.mtp_step_s is None


def test_frozen_costs_are_the_calibration_as_measured_and_ignore_later_timings():
    calibration = Calibration({1: STEP, 2: 1.3 * STEP, 4: 2.2 * STEP, 8: 4.8 * STEP}, draft_step_s=0.6 * STEP)
    costs = frozen_costs(calibration)
    costs.observe_verify(4, 10.0)
    costs.observe_draft_step(10.0)
    assert costs.calibration() == calibration
    # Rounds are priced at the calibrated costs: a failed lookup round of 3 costs a width of 4.
    rounds = [event(DrafterKind.NONE, 0, 0), event(DrafterKind.LOOKUP, 3, 0), event(DrafterKind.DRAFT_MODEL, 1, 1)]
    assert simulated_rate(rounds, costs) == pytest.approx(3 / (2.2 * STEP + 1.3 * STEP + 0.6 * STEP))


def test_an_earlier_runs_frozen_costs_are_read_back_from_its_json(tmp_path):
    calibration = Calibration({1: STEP, 4: 2.2 * STEP}, draft_step_s=0.6 * STEP)
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps({"engine": {}, "simulated_calibration": calibration.as_dict()}))  # keys become text
    assert calibration_from(str(saved)) == calibration


def test_a_gpu_simulation_reuses_an_earlier_runs_step_so_runs_apart_compare(tmp_path):
    earlier = Calibration({1: STEP, 8: 1.2 * STEP}, draft_step_s=0.1 * STEP)
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps({"engine": {}, "simulated_calibration": earlier.as_dict()}))
    costs = simulated_costs("gpu", calibration_from(str(saved)), draft=True, mtp=False)
    assert costs.calibration() == SimulatedGpuCosts(STEP, draft=True).calibration()
    assert simulated_costs("frozen", earlier, draft=True, mtp=False).calibration() == earlier


def test_round_seconds_prices_verification_plus_the_drafters_steps():
    costs = SimulatedGpuCosts(STEP, draft=True, mtp=True)
    assert round_seconds(event(DrafterKind.NONE, 0, 0), costs) == pytest.approx(STEP)
    assert round_seconds(event(DrafterKind.DRAFT_MODEL, 4, 2), costs) == pytest.approx(
        costs.verify_s(5) + 4 * 0.1 * STEP
    )
    # The step the draft model took and then was too unsure to use is paid too, and so is its catch-up on
    # a prompt it had not seen (which, at a CPU's prefill rate, can cost more than the answer's first rounds).
    assert round_seconds(event(DrafterKind.DRAFT_MODEL, 2, 2, steps=3, caught_up=200), costs) == pytest.approx(
        costs.verify_s(3) + 3 * 0.1 * STEP + 200 * costs.draft_prefill_s
    )
    assert round_seconds(event(DrafterKind.MTP, 2, 2), costs) == pytest.approx(costs.verify_s(3) + 2 * 0.05 * STEP)
    for free in (DrafterKind.LOOKUP, DrafterKind.HISTORY):
        assert round_seconds(event(free, 7, 7), costs) == pytest.approx(1.2 * STEP)


def test_simulated_rate_is_one_over_step_for_plain_and_follows_the_wall_clock_rule():
    costs = SimulatedGpuCosts(STEP)
    assert simulated_rate(plain_rounds(20), costs) == pytest.approx(1 / STEP)
    # The round that ends with end-of-generation adds no token: like the wall clock, it is not timed.
    assert simulated_rate(plain_rounds(20) + [event(DrafterKind.NONE, 0, 0, n_tokens=0)], costs) == pytest.approx(
        1 / STEP
    )
    # First token plain (not timed), then two draft rounds of k=4: 5 and 3 tokens.
    rounds = [event(DrafterKind.NONE, 0, 0), event(DrafterKind.DRAFT_MODEL, 4, 4), event(DrafterKind.DRAFT_MODEL, 4, 2)]
    per_round = costs.verify_s(5) + 4 * 0.1 * STEP
    assert simulated_rate(rounds, costs) == pytest.approx(8 / (2 * per_round))
    assert simulated_rate(plain_rounds(1), costs) == 0.0
    assert simulated_rate([], costs) == 0.0


def test_oracle_is_the_best_fixed_configuration_plain_included():
    assert oracle_choice({"plain": 1.0, "draft-k4": 1.4, "lookup": 1.2, "auto": 1.9}) == ("draft-k4", 1.4)
    assert oracle_choice({"plain": 1.0, "draft-k4": 0.7, "auto-nohistory": 1.5}) == ("plain", 1.0)
    assert oracle_choice({"draft-k2": 0.8}) == ("plain", 1.0)  # plain counts as 1.0 even when absent
    assert oracle_choice({"plain": 1.0, "lookup": 1.0}) == ("plain", 1.0)  # the earlier of equals


def test_geomean():
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert geomean([1.1, 1.1, 1.1]) == pytest.approx(1.1)
    assert geomean([]) is None


def run(prompt: str, config: str, temp: float, tps: float, estimated: float = 0.0, text: str = "") -> Run:
    return Run(prompt, config, temp, n_tokens=64, decode_tps=tps, estimated=estimated, text=text)


def test_summarise_judges_auto_against_the_oracle(capsys):
    configs = ["plain", "draft-k4", "lookup", "auto"]
    runs = [
        run("a", "plain", 0.0, 30.0),
        run("a", "draft-k4", 0.0, 45.0, text="the answer, rounded another way"),
        run("a", "lookup", 0.0, 33.0),
        run("a", "auto", 0.0, 42.0, estimated=1.5),
        run("b", "plain", 0.0, 30.0),
        run("b", "draft-k4", 0.0, 24.0),
        run("b", "lookup", 0.0, 27.0),
        run("b", "auto", 0.0, 30.0, estimated=1.0),
    ]
    s = summarise(runs, [{"id": "a"}, {"id": "b"}], configs, None, None)
    assert s["oracle"]["T0"] == {  # whether auto wrote the oracle's answer: speeds of two answers compare less
        "a": {"config": "draft-k4", "speedup": pytest.approx(1.5), "same_text": False},
        "b": {"config": "plain", "speedup": pytest.approx(1.0), "same_text": True},
    }
    assert s["auto_vs_oracle"]["T0"] == {"a": pytest.approx(1.4 / 1.5), "b": pytest.approx(1.0)}
    g = s["geomean"]["T0"]
    assert g["auto"] == pytest.approx(math.sqrt(1.4))
    assert g["oracle"] == pytest.approx(math.sqrt(1.5))
    assert g["auto_vs_oracle"] == pytest.approx(math.sqrt(1.4 / 1.5))
    goals = s["goals"]
    assert goals["auto >= 0.95x oracle on every prompt (min)"] == pytest.approx(1.4 / 1.5)
    assert goals["geomean auto >= 0.97x geomean oracle (min over temperatures)"] == pytest.approx(math.sqrt(1.4 / 1.5))
    assert goals["auto >= 0.97x plain on every prompt (min)"] == pytest.approx(1.0)
    assert goals["auto: |estimate / measured - 1| <= 0.10 on every prompt (max)"] == pytest.approx(1.5 / 1.4 - 1)
    print_oracle_table(s)
    table = capsys.readouterr().out
    assert "differ" in table and "different answers on 1 of 2 prompts at T0" in table
    # With simulated costs the footer's wall-clock estimate is not compared.
    simulated = summarise(runs, [{"id": "a"}, {"id": "b"}], configs, None, None, estimates=False)
    assert simulated["estimate_error"] == {}
    assert not any("estimate" in goal for goal in simulated["goals"])


def test_an_agent_pass_is_timed_by_all_its_rounds_at_the_simulated_costs():
    from engine.bench_agent import pass_seconds

    costs = frozen_costs(Calibration({1: STEP, 2: 1.3 * STEP, 4: 2.2 * STEP, 32: 9.0 * STEP}, draft_step_s=0.6 * STEP))
    # Unlike a chat answer's decode rate, a pass counts its first round too, as AnswerStats.gen_s does.
    rounds = [event(DrafterKind.HISTORY, 31, 31), event(DrafterKind.LOOKUP, 3, 0), event(DrafterKind.NONE, 0, 0)]
    assert pass_seconds(rounds, costs) == pytest.approx(9.0 * STEP + 2.2 * STEP + STEP)
    assert pass_seconds([], costs) == 0.0


def test_the_agent_benchmark_takes_an_earlier_calibration_only_with_simulated_costs(tmp_path, capsys):
    from engine.bench_agent import main

    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps({"engine": {}, "simulated_calibration": Calibration({1: STEP}).as_dict()}))
    for argv, says in (
        (["--calibration", str(saved)], "goes with --costs frozen or gpu"),
        (["--costs", "frozen", "--calibration", str(tmp_path / "none.json")], "not a JSON this benchmark wrote"),
        (["--configs", "plain"], "plain, auto and any of"),
    ):
        with pytest.raises(SystemExit) as ended:  # before any model loads
            main(argv)
        assert ended.value.code == 2 and says in capsys.readouterr().err


def test_answers_drawn_with_different_seeds_are_not_judged_same_or_different():
    # Above 0 each repeat draws with its own seed, so a configuration's median run may be another answer
    # than auto's: whether the texts match says nothing then.
    runs = [
        Run("a", "plain", 0.7, n_tokens=64, decode_tps=30.0, text="x", seed=1),
        Run("a", "draft-k4", 0.7, n_tokens=64, decode_tps=45.0, text="y", seed=2),
        Run("a", "auto", 0.7, n_tokens=64, decode_tps=42.0, text="y", seed=1),
        Run("b", "plain", 0.7, n_tokens=64, decode_tps=30.0, text="x", seed=1),
        Run("b", "draft-k4", 0.7, n_tokens=64, decode_tps=45.0, text="y", seed=1),
        Run("b", "auto", 0.7, n_tokens=64, decode_tps=42.0, text="z", seed=1),
    ]
    oracle = summarise(runs, [{"id": "a"}, {"id": "b"}], ["plain", "draft-k4", "auto"], None, None)["oracle"]["T0.7"]
    assert "same_text" not in oracle["a"]
    assert oracle["b"]["same_text"] is False
