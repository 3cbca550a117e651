"""Choosing, before each round, which drafter to use and how many tokens to draft.

The choice maximises expected tokens per second from two measured things: what a decode of n
tokens costs on this machine (calibrated at load, then updated from every real step), and how
often each drafter's tokens are accepted (tracked online with a short memory). When nothing
pays, it drafts nothing and the round is a plain decoding step: on a CPU where verifying k
tokens costs nearly k single steps, that is the honest answer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from engine.config import DrafterKind

WINDOW = 15  # recent timings kept per batch width; their median resists a busy moment
PLAIN_MARGIN = 1.05  # expected gain a drafter must promise before auto leaves plain decoding
# A verification is padded to a wider batch only when that costs less than this share of its own: a
# kernel's tile saves 12-19% (15 tokens padded to 16 on an AVX-512 CPU); smaller differences are as
# likely the timings' noise.
PAD_GAIN = 0.9
# A verified token attends to every token before it, so a decode costs more the longer the context, and a
# wide batch more so: on an AVX-512 EPYC, at 1,000 tokens of context a step cost 10 % more than at 16 and a
# batch of 32 49 % more (6 µs per verified token per token of context). The calibration times every width
# at a 16-token context; that rate is learned from real rounds spanning at least this many token pairs
# (width x context beyond the calibration's: a batch of 16 after 1,040 tokens, of 32 after 528), where
# attention is a quarter of the decode or more: a 2-core machine's speed wanders by 10 % and more between
# the calibration and a round, which would swamp a smaller share. A step alone never spans it.
ATTENTION_SPAN = 16384
MEMORY = 0.85  # decay of acceptance counts per observation: about the last dozen matter
# Decay per round of a model drafter's counts while another is used: what it learned fades slowly
# (half in ~140 rounds) towards the prior, so it carries to the next answers.
DRIFT = 0.995
# A drafter's one-time catch-up (a draft model evaluating a new prompt) is spread over the tokens the answer
# may still write, at most this many: a typical answer's length, as auto cannot know this one's.
HORIZON = 256


@dataclass(frozen=True)
class Calibration:
    """What decoding costs on this machine, as the CostModel has it now (EngineInfo.calibration)."""

    verify_s: dict[int, float]  # one target decode of n tokens, per measured n (1 always)
    draft_step_s: float | None = None  # one draft-model step (None: no draft model)
    mtp_step_s: float | None = None  # one step of the target's MTP head (None: no head)
    draft_prefill_s: float | None = None  # per token, when the draft model evaluates many at once
    rollback_s: float = 0.0  # undoing a rejected draft on a recurrent target (0 elsewhere)
    padded: dict[int, int] = field(default_factory=dict)  # n tokens verified as a wider, cheaper batch
    # What each verified token pays per token of context beyond the calibration's (0: not learned yet).
    attention_s: float = 0.0
    calibrated_at: int = 16  # the context, in tokens, that verify_s was timed at

    @property
    def step_s(self) -> float:
        """The target's single-token step: what plain decoding pays per token."""
        return self.verify_s[1]

    def as_dict(self) -> dict:
        """The JSON shape the benchmarks write."""
        return asdict(self)

    def describe(self) -> list[str]:
        """What auto believes each thing costs, a line each: per verified width the time, the time a token,
        and that as a share of a single step (below 1: drafting that many can pay)."""
        step = self.step_s
        lines = [f"target step {1000 * step:.1f} ms"]
        for n, seconds in sorted(self.verify_s.items()):
            if n > 1:
                lines.append(
                    f"verify {n:>2} tokens {1000 * seconds:6.1f} ms: {1000 * seconds / n:5.1f} ms a token "
                    f"({seconds / n / step:.2f} of a step)"
                )
        for width, ns in _padded_runs(self.padded):
            many = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
            lines.append(f"verify {many} tokens as a batch of {width}: it costs less here")
        if self.attention_s:
            lines.append(describe_attention(self.attention_s))
        if self.draft_step_s is not None:
            lines.append(
                f"draft-model step {1000 * self.draft_step_s:.1f} ms ({self.draft_step_s / step:.2f} of a step)"
            )
        if self.draft_prefill_s is not None:
            lines.append(f"draft model catching up {1000 * self.draft_prefill_s:.2f} ms a token of a new prompt")
        if self.mtp_step_s is not None:
            lines.append(f"MTP-head step {1000 * self.mtp_step_s:.1f} ms ({self.mtp_step_s / step:.2f} of a step)")
        if self.rollback_s:
            lines.append(f"undoing a rejected draft {1000 * self.rollback_s:.1f} ms")
        return lines


def describe_attention(seconds_per_pair: float) -> str:
    """What a token of context adds to a decode, in words (engine info's costs and its auto-learned lines)."""
    return (
        f"each token of context adds {1e6 * seconds_per_pair:.1f} µs a verified token (after 1,000 tokens of "
        f"context: a step {1e6 * seconds_per_pair:.0f} ms more, verifying 16 tokens {16e6 * seconds_per_pair:.0f} ms more)"
    )


def _padded_runs(padded: Mapping[int, int]) -> list[tuple[int, list[int]]]:
    """Calibration.padded grouped by the width padded to: [(16, [12, 13, 14, 15]), …]."""
    runs: dict[int, list[int]] = {}
    for n in sorted(padded):
        runs.setdefault(padded[n], []).append(n)
    return sorted(runs.items())


class CostModel:
    """Seconds for one target decode of n tokens at the current context, and one draft-model step.

    Each figure is the median of the last few observations (calibration first, then real
    steps), so a spike from another program does not swing the choice. Widths between those
    observed are interpolated. A wider batch is taken to cost at least what a narrower one did,
    except that on a target that can pad a decode (ModelRunner.can_pad), n tokens cost what a wider
    batch costs where that is clearly cheaper (PAD_GAIN), and verify_width says which width that is.

    A decode of n tokens after c tokens of context costs its width's cost at the calibration's short
    context plus n x (c - calibrated_at) x attention_s, the rate learned from rounds at long contexts
    (ATTENTION_SPAN). Observations are kept with their context and brought to the calibration's before
    their median is taken, so a width timed at 2,000 tokens and one timed only at load compare alike.
    `context` is the context the next round attends to (the speculator sets it every round).
    """

    def __init__(
        self,
        verify_s: dict[int, float],
        draft_step_s: float | None = None,
        rollback_s: float = 0.0,
        mtp_step_s: float | None = None,
        draft_prefill_s: float | None = None,
        pads: bool = False,
        attention_s: float = 0.0,
        calibrated_at: int = 16,
    ):
        assert 1 in verify_s, "the single-token step must be measured"
        self.pads = pads
        self.calibrated_at = self.context = calibrated_at
        self._calibrated = dict(sorted(verify_s.items()))  # the reference the attention rate is learned against
        self._verify = {n: deque([(t, calibrated_at)], maxlen=WINDOW) for n, t in verify_s.items()}
        self._attention = deque([attention_s] if attention_s else [], maxlen=WINDOW)
        self._draft = deque([draft_step_s] if draft_step_s is not None else [], maxlen=WINDOW)
        self._draft_prefill = deque([draft_prefill_s] if draft_prefill_s is not None else [], maxlen=WINDOW)
        self._mtp = deque([mtp_step_s] if mtp_step_s is not None else [], maxlen=WINDOW)
        # A recurrent target undoes a rejected draft from a checkpoint: saving it before every drafted
        # round and restoring it after a rejection (calibrated), then re-evaluating the accepted tokens.
        self.rolls_back = rollback_s > 0
        self._checkpoint = rollback_s
        self._rollback: deque[float] = deque(maxlen=WINDOW)
        self._plain_overhead: deque[float] = deque(maxlen=WINDOW)
        self._measured: list[float] = []  # index n -> seconds at the calibration's context, unpadded ([]: rebuild)
        self._widths: list[int] = []  # index n -> the batch width n tokens are padded to where that is cheaper
        self._slope = 0.0  # seconds per token beyond the widest width observed
        self._rate = 0.0  # attention_s as of the last rebuild

    @property
    def step_s(self) -> float:
        """The target's single-token step at the current context: what plain decoding pays per token."""
        return self.verify_s(1)

    @property
    def attention_s(self) -> float:
        """Seconds each verified token pays per token of context beyond the calibration's (0 until learned)."""
        return _median(self._attention) if self._attention else 0.0

    @property
    def draft_step_s(self) -> float | None:
        return _median(self._draft) if self._draft else None

    @property
    def draft_prefill_s(self) -> float | None:
        """Per token, what the draft model pays to evaluate a stretch of context it has not seen."""
        return _median(self._draft_prefill) if self._draft_prefill else None

    @property
    def mtp_step_s(self) -> float | None:
        """One step of the target's MTP head."""
        return _median(self._mtp) if self._mtp else None

    @property
    def plain_overhead_s(self) -> float:
        """What a plain step costs beyond its decode: sampling, the text layer and whoever reads the answer's
        events, as plain rounds measured it (0 until one has). The estimate of plain decoding pays it per token;
        auto's choices leave it out (a drafted round pays it less often, so leaving it out is cautious)."""
        return _median(self._plain_overhead) if self._plain_overhead else 0.0

    def step_cost(self, drafter: DrafterKind) -> float:
        """What one drafted token costs a built-in drafter named by kind: a model's step, ~0 for lookup
        and history (best_choice's shorthand; drafters price themselves with Drafter.step_s)."""
        if drafter == DrafterKind.DRAFT_MODEL:
            return self.draft_step_s or self.step_s
        if drafter == DrafterKind.MTP:
            return self.mtp_step_s or self.step_s
        return 0.0

    def verify_s(self, n: int, context: int | None = None) -> float:
        """One decode of n tokens after context tokens (default: the current context), padded where that is cheaper."""
        return self._priced(n, self.context if context is None else context)[0]

    def verify_width(self, n: int) -> int:
        """The batch width to verify n tokens at: n, or on a target that pads, a wider one that costs less."""
        return self._priced(n, self.context)[1]

    def _priced(self, n: int, context: int) -> tuple[float, int]:
        if not self._measured:
            self._build()
        top = len(self._measured) - 1
        own = self._measured[n] if n <= top else self._measured[top] + self._slope * (n - top)
        own += self._attention_cost(n, context)
        width = self._widths[n] if n <= top else n
        if width != n:  # the wider batch's extra tokens attend to the context too
            padded = self._measured[width] + self._attention_cost(width, context)
            if padded < PAD_GAIN * own:
                return padded, width
        return own, n

    def _attention_cost(self, width: int, context: int) -> float:
        return self._rate * width * max(context - self.calibrated_at, 0)

    def _build(self) -> None:
        # Pure Python on purpose: this runs once per round, and numpy's per-call overhead on a
        # handful of numbers would cost more than the arithmetic.
        self._rate = self.attention_s
        ns = sorted(self._verify)
        medians = [_median([self._at_calibration(n, t, c) for t, c in self._verify[n]]) for n in ns]
        if not self.pads:  # unpadded, a wider batch costs at least what a narrower one did
            medians = [max(medians[: i + 1]) for i in range(len(medians))]
        measured = [0.0]
        for n in range(1, ns[-1] + 1):
            i = next(j for j, m in enumerate(ns) if m >= n)
            if ns[i] == n or i == 0:
                measured.append(medians[i])
            else:
                # Between a width and a cheaper wider one (a kernel's tile), the narrower cost holds.
                share = (n - ns[i - 1]) / (ns[i] - ns[i - 1])
                measured.append(medians[i - 1] + share * max(medians[i] - medians[i - 1], 0.0))
        top = len(measured) - 1
        self._slope = (measured[-1] - measured[-2]) if top > 1 else measured[-1]
        widths = list(range(top + 1))
        if self.pads:
            # From the widest down: pad n to the cheapest width above it when that is clearly cheaper.
            cheapest = top
            for n in range(top, 0, -1):
                if measured[cheapest] < PAD_GAIN * measured[n]:
                    widths[n] = cheapest
                elif measured[n] <= measured[cheapest]:
                    cheapest = n
        self._measured, self._widths = measured, widths

    def _at_calibration(self, n: int, seconds: float, context: int) -> float:
        """A timing at context brought to the calibration's context (never below a tenth of itself)."""
        return max(seconds - self._attention_cost(n, context), 0.1 * seconds)

    def _reference(self, n: int) -> float:
        """The calibration's own cost of n tokens (interpolated; beyond the widest, extrapolated)."""
        ns = list(self._calibrated)
        if n in self._calibrated or len(ns) == 1:
            return self._calibrated.get(n, self._calibrated[ns[0]] * n)
        hi = next((m for m in ns if m > n), ns[-1])
        lo = max((m for m in ns if m < hi), default=ns[0])
        return self._calibrated[lo] + (n - lo) * (self._calibrated[hi] - self._calibrated[lo]) / (hi - lo)

    def observe_verify(self, n: int, seconds: float, context: int | None = None) -> None:
        """A decode of n tokens took seconds after context tokens (default: the current context)."""
        context = self.context if context is None else context
        self._verify.setdefault(n, deque(maxlen=WINDOW)).append((seconds, context))
        pairs = n * (context - self.calibrated_at)
        if pairs >= ATTENTION_SPAN:
            self._attention.append(max(seconds - self._reference(n), 0.0) / pairs)
        self._measured = []

    def observe_attention(self, seconds_per_pair: float) -> None:
        """What a verified token paid per token of context, measured apart (Speculator.measure_attention)."""
        self._attention.append(max(seconds_per_pair, 0.0))
        self._measured = []

    def recall_attention(self, seconds_per_pair) -> None:
        """The rate an earlier session learned (auto's memory), as one observation: this session's outvote it.
        Anything but a plausible rate (a number from 0 to a millisecond) is ignored."""
        if isinstance(seconds_per_pair, float) and 0.0 < seconds_per_pair < 1e-3:
            self.observe_attention(seconds_per_pair)

    def observe_draft_step(self, seconds: float) -> None:
        self._draft.append(seconds)

    def observe_draft_prefill(self, seconds_per_token: float) -> None:
        self._draft_prefill.append(seconds_per_token)

    def observe_mtp_step(self, seconds: float) -> None:
        self._mtp.append(seconds)

    def observe_rollback(self, seconds: float) -> None:
        """A rejected draft undone: the restore and the accepted tokens' re-evaluation, measured."""
        self._rollback.append(seconds)

    def observe_plain_overhead(self, seconds: float) -> None:
        self._plain_overhead.append(max(seconds, 0.0))

    def round_overhead_s(self, expected: float, p_all_accepted: float) -> float:
        """What a drafted round costs beyond its verification on a recurrent target (0 elsewhere):
        the checkpoint, and when any draft token is rejected, going back and re-evaluating."""
        if not self.rolls_back:
            return 0.0
        undo = _median(self._rollback) if self._rollback else self._checkpoint + self.verify_s(round(expected))
        return self._checkpoint + (1.0 - p_all_accepted) * undo

    def calibration(self) -> Calibration:
        """The costs at the calibration's context, and the attention rate that moves them with the context."""
        context = self.calibrated_at
        if not self._measured:
            self._build()
        return Calibration(
            verify_s={n: self.verify_s(n, context) for n in sorted(self._verify)},
            padded={n: w for n in range(2, len(self._widths)) if (w := self._priced(n, context)[1]) != n},
            draft_step_s=self.draft_step_s,
            mtp_step_s=self.mtp_step_s,
            draft_prefill_s=self.draft_prefill_s,
            rollback_s=_median(self._rollback) if self._rollback else self._checkpoint,
            attention_s=self.attention_s,
            calibrated_at=self.calibrated_at,
        )


class FixedCosts(CostModel):
    """A machine's costs as given, never moved by real timings: for a simulated machine (the
    benchmark's GPU regime) and for tests of auto's choices under known costs."""

    def observe_verify(self, n: int, seconds: float, context: int | None = None) -> None:
        pass

    def observe_attention(self, seconds_per_pair: float) -> None:
        pass

    def observe_draft_step(self, seconds: float) -> None:
        pass

    def observe_draft_prefill(self, seconds_per_token: float) -> None:
        pass

    def observe_mtp_step(self, seconds: float) -> None:
        pass

    def observe_rollback(self, seconds: float) -> None:
        pass

    def observe_plain_overhead(self, seconds: float) -> None:
        pass


def _median(values) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class AcceptanceTracker:
    """How often one drafter's tokens are accepted, as two rates with a short, decaying memory.

    first: the chance its first token is accepted; next: the chance a token is accepted given
    the one before it was. Copying runs make the second much higher than the first, which a
    single per-token rate would hide. A round that drafted d tokens and kept m saw: the first
    accepted or not; m - 1 continuations accepted; and one rejected continuation if 1 <= m < d.
    Counts decay with each observation (and, for a drafter not being tried, each round), so
    the estimate returns towards the prior and the drafter gets tried again.
    """

    def __init__(self, prior_first: float = 0.5, prior_next: float = 0.5, prior_weight: float = 2.0):
        self.prior_first, self.prior_next, self.prior_weight = prior_first, prior_next, prior_weight
        self.first = [0.0, 0.0]  # accepted, rejected
        self.next = [0.0, 0.0]
        self.seen = 0  # rounds observed, ever (not decayed): how much auto has tried it at all

    def _rate(self, counts: list[float], prior: float) -> float:
        return (counts[0] + prior * self.prior_weight) / (counts[0] + counts[1] + self.prior_weight)

    @property
    def first_rate(self) -> float:
        return self._rate(self.first, self.prior_first)

    @property
    def next_rate(self) -> float:
        return self._rate(self.next, self.prior_next)

    @property
    def rates(self) -> tuple[float, float]:
        return self.first_rate, self.next_rate

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        if n_drafted <= 0:
            return
        self.decay()
        self.seen += 1
        self.first[0 if n_accepted >= 1 else 1] += 1
        self.next[0] += max(n_accepted - 1, 0)
        if 1 <= n_accepted < n_drafted:
            self.next[1] += 1

    def decay(self, factor: float = MEMORY) -> None:
        for counts in (self.first, self.next):
            counts[0] *= factor
            counts[1] *= factor

    def counts(self) -> dict[str, list[float]]:
        """What it has seen, as JSON (the priors are the drafter's, not stored)."""
        return {"first": [round(c, 4) for c in self.first], "next": [round(c, 4) for c in self.next], "seen": self.seen}

    def recall(self, counts: dict) -> None:
        """Take counts() written earlier; anything malformed leaves the tracker as it was."""
        try:
            first, cont = [float(c) for c in counts["first"]], [float(c) for c in counts["next"]]
            seen = int(counts.get("seen", 0))
        except (KeyError, TypeError, ValueError, OverflowError):
            return
        if len(first) == len(cont) == 2 and all(0.0 <= c < 1e6 for c in first + cont) and seen >= 0:  # NaN fails
            self.first, self.next, self.seen = first, cont, seen


@dataclass(frozen=True)
class RoundEstimate:
    """A drafter's rounds as measured, priced at today's costs: what one round yields and costs."""

    tokens: float  # committed per round: the accepted drafts and the target's own
    seconds: float  # drafting (every step taken) and verifying, per round
    p_all: float  # the share of rounds whose drafts were all accepted


class RoundShape:
    """What a model drafter's rounds looked like where it stopped on its own confidence (temperature 0):
    per round the tokens it drafted, the steps it took and the tokens the target kept, with the same
    decaying memory as AcceptanceTracker, from a prior of one poor round.

    Such a round's length follows the model's confidence, not a k auto picks, so a geometric run at
    the tracker's rates misjudges it: a draft model sure of one token at a time is accepted every
    time, which reads as a high rate, yet each round pays two steps (the second too unsure to use)
    and a verification for two tokens. Priced from what its rounds were, it is used where they paid.
    """

    PRIOR = (1, 2, 0.5)  # one pseudo-round: 1 token drafted in 2 steps, accepted half the time

    def __init__(self):
        self.lengths: dict[int, float] = {}  # tokens drafted -> rounds (decayed)
        self.steps = self.accepted = self.all_accepted = 0.0

    @property
    def rounds(self) -> float:
        return sum(self.lengths.values())

    def observe(self, n_drafted: int, n_steps: int, n_accepted: int) -> None:
        if n_drafted <= 0:
            return
        self.decay()
        self.lengths[n_drafted] = self.lengths.get(n_drafted, 0.0) + 1.0
        self.steps += n_steps
        self.accepted += n_accepted
        self.all_accepted += n_accepted == n_drafted

    def decay(self, factor: float = MEMORY) -> None:
        self.lengths = {n: w * factor for n, w in self.lengths.items() if w * factor > 1e-3}
        self.steps *= factor
        self.accepted *= factor
        self.all_accepted *= factor

    def estimate(self, costs: CostModel, step_s: float) -> RoundEstimate:
        """Its rounds, the prior's included, at these costs (step_s: one of its steps)."""
        length, steps, accepted = self.PRIOR
        rounds = self.rounds + 1.0
        verify = sum(w * costs.verify_s(n + 1) for n, w in self.lengths.items()) + costs.verify_s(length + 1)
        return RoundEstimate(
            tokens=1.0 + (self.accepted + accepted) / rounds,
            seconds=(verify + (self.steps + steps) * step_s) / rounds,
            p_all=(self.all_accepted + accepted) / rounds,
        )

    def counts(self) -> dict:
        """What it has seen, as JSON."""
        return {
            "lengths": {str(n): round(w, 4) for n, w in sorted(self.lengths.items())},
            "steps": round(self.steps, 4),
            "accepted": round(self.accepted, 4),
            "all": round(self.all_accepted, 4),
        }

    def recall(self, counts: dict) -> None:
        """Take counts() written earlier; anything malformed leaves it as it was."""
        try:
            lengths = {int(n): float(w) for n, w in counts["lengths"].items()}
            totals = [float(counts[name]) for name in ("steps", "accepted", "all")]
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            return
        values = [*lengths.values(), *totals]
        if all(0.0 <= v < 1e6 for v in values) and all(0 < n < 1024 for n in lengths):  # NaN fails
            self.lengths = lengths
            self.steps, self.accepted, self.all_accepted = totals


def expected_tokens(alpha: float | tuple[float, float], k: int) -> float:
    """Tokens a round yields with k drafts (plus the target's own): 1 + a1 (1 - a^k) / (1 - a).

    alpha is one per-token rate, or (first, next) rates as AcceptanceTracker keeps them.
    """
    first, cont = alpha if isinstance(alpha, tuple) else (alpha, alpha)
    if k <= 0:
        return 1.0
    run = k if cont >= 1.0 else (1.0 - cont**k) / (1.0 - cont)
    return 1.0 + first * run


@dataclass(frozen=True)
class Option:
    """What a drafter can do this round, as auto scores it."""

    rates: float | tuple[float, float]  # acceptance, as AcceptanceTracker keeps it
    k_max: int  # the most tokens it can draft now
    step_s: float  # what one drafted token costs it (0 for a drafter that runs no model)
    catch_up_s: float = 0.0  # paid once before its first token: a draft model evaluating a new prompt
    # Per drafted token, the share of the earlier occurrences that went on so (a matching drafter's
    # Offer.support; empty: all). Where a history's runs split, the rates alone would overrate the guess.
    support: tuple[float, ...] = ()
    # A drafter that ends its own rounds (a model at temperature 0, RoundShape): what they were, which
    # prices it instead of the rates; it drafts up to k_max and stops where it is unsure.
    measured: RoundEstimate | None = None


@dataclass(frozen=True)
class Choice:
    drafter: DrafterKind
    draft_length: int
    expected_tps: float


def best_choice(
    costs: CostModel,
    options: Mapping[DrafterKind, Option | tuple[float | tuple[float, float], int]],
    allow_none: bool = True,
    fixed_k: bool = False,
    horizon: int = HORIZON,
) -> Choice:
    """The drafter and k with the highest expected tokens/s.

    options maps drafter -> Option, or the shorthand (acceptance rate(s), largest k it can offer
    now) priced by CostModel.step_cost. allow_none=False is for a user who chose a drafter: then
    only its k adapts, and DrafterKind.NONE is the answer only when no drafter can offer anything
    this round. fixed_k: each drafter offers exactly its k_max. horizon: the tokens the answer may still
    write, over which an option's catch-up is spread (capped at HORIZON).
    """
    best = Choice(DrafterKind.NONE, 0, 1.0 / costs.step_s if allow_none else 0.0)
    # Drafting must beat plain decoding clearly: the model of acceptance is approximate, and a
    # coin-flip gain is not worth a possible loss.
    bar = best.expected_tps * PLAIN_MARGIN
    for drafter, option in options.items():
        if not isinstance(option, Option):
            option = Option(*option, costs.step_cost(DrafterKind(drafter)))
        alpha, per_token = option.rates, option.step_s
        first, cont = alpha if isinstance(alpha, tuple) else (alpha, alpha)
        catch_up_per_token = option.catch_up_s / max(min(horizon, HORIZON), 1)
        if option.measured is not None and not fixed_k:
            m = option.measured
            overhead = costs.round_overhead_s(m.tokens - 1.0, m.p_all)
            tps = m.tokens / (m.seconds + overhead + m.tokens * catch_up_per_token)
            if tps > max(bar, best.expected_tps):
                best = Choice(DrafterKind(drafter), option.k_max, tps)
            continue
        runs = _supported_runs(first, cont, option.support, option.k_max) if option.support else None
        for k in [option.k_max] if fixed_k else range(1, option.k_max + 1):
            expected = expected_tokens(alpha, k) if runs is None else 1.0 + sum(runs[:k])
            p_all = first * cont ** (k - 1) if runs is None else runs[k - 1]
            overhead = costs.round_overhead_s(expected, p_all)
            tps = expected / (k * per_token + costs.verify_s(k + 1) + overhead + expected * catch_up_per_token)
            if tps > max(bar, best.expected_tps):
                best = Choice(DrafterKind(drafter), k, tps)
    return best


def _supported_runs(first: float, cont: float, support: tuple[float, ...], k_max: int) -> list[float]:
    """Per i in 1..k_max, the chance that the first i drafted tokens are all accepted: the rates' chance
    times the share of earlier occurrences that went on so (the last share holds beyond the support)."""
    runs, p = [], first
    for i in range(k_max):
        runs.append(p * support[min(i, len(support) - 1)])
        p *= cont
    return runs


class ConfidenceCalibration:
    """How often the draft model's tokens are accepted, per unit of its own confidence.

    A draft model that says 0.9 but is accepted 60% of the time is overconfident by 1.5x; the
    stopping threshold is raised by that much. Judged tokens are those up to the first rejection.
    """

    def __init__(self):
        self.confidence = 0.0
        self.accepted = 0.0
        self.joint_predicted = 0.0  # tokens the drafts' joint confidences expected to be accepted
        self.joint_accepted = 0.0

    @property
    def ratio(self) -> float:
        prior = 2.0  # pseudo-observations of a well-calibrated model
        return (self.accepted + prior) / (self.confidence + prior)

    @property
    def joint_ratio(self) -> float:
        """Accepted tokens per token the products of the drafts' confidences predicted: a draft's
        expected accepted run is the sum over its positions of the chance that all up to there are
        accepted, so this corrects that chance itself (a model sure of every token of a run it gets
        wrong early is overconfident in the product far more than token by token)."""
        prior = 2.0
        return (self.joint_accepted + prior) / (self.joint_predicted + prior)

    def observe(self, confidence: list[float], n_accepted: int) -> None:
        judged = confidence[: n_accepted + 1]
        self.confidence += sum(judged)
        self.accepted += n_accepted
        self.joint_predicted += float(np.cumprod(confidence).sum()) if confidence else 0.0
        self.joint_accepted += min(n_accepted, len(confidence))

    def decay(self, factor: float = MEMORY) -> None:
        self.confidence *= factor
        self.accepted *= factor
        self.joint_predicted *= factor
        self.joint_accepted *= factor

    FIELDS = ("confidence", "accepted", "joint_predicted", "joint_accepted")

    def counts(self) -> dict[str, float]:
        """What it has seen, as JSON."""
        return {name: round(getattr(self, name), 4) for name in self.FIELDS}

    def recall(self, counts: dict) -> None:
        """Take counts() written earlier; anything malformed leaves it as it was."""
        try:
            values = [float(counts[name]) for name in self.FIELDS]
        except (KeyError, TypeError, ValueError, OverflowError):
            return
        if all(0.0 <= v < 1e6 for v in values):  # NaN fails
            for name, value in zip(self.FIELDS, values, strict=True):
                setattr(self, name, value)


def confidence_floor(
    costs: CostModel,
    k: int,
    step_s: float | None,
    calibration: ConfidenceCalibration | None = None,
    rate: float | None = None,
) -> float:
    """A model drafter's adaptive p_min: stop drafting when one more token is not worth its cost.

    One more draft token costs the drafter's step (step_s, as measured; None: not yet) plus the
    extra verification width, and yields a token if accepted. The time is worth what the answer
    gets from time at the rate it is going (rate, tokens/s: the round's expected rate, at least
    plain decoding's): to maximise tokens per second, a token is worth drafting only while its
    chance times 1 exceeds its time times that rate (Dinkelbach's rule for a ratio). Priced at plain
    decoding's rate instead, a GPU's cheap draft steps would run on to 20 or 30 tokens of which the
    tail is mostly rejected. Its draft probability, corrected by how well that probability has
    predicted acceptance so far, stands in for the acceptance chance.
    """
    if step_s is None:
        return 0.5
    marginal = step_s + costs.verify_s(k + 2) - costs.verify_s(k + 1)
    ratio = calibration.ratio if calibration else 1.0
    value_of_time = max(rate or 0.0, 1.0 / costs.step_s)
    return float(np.clip(marginal * value_of_time / max(ratio, 1e-3), 0.2, 0.95))


def draft_confidence_floor(costs: CostModel, k: int, calibration: ConfidenceCalibration | None = None) -> float:
    """The draft model's p_min (confidence_floor at its measured step)."""
    return confidence_floor(costs, k, costs.draft_step_s, calibration)
