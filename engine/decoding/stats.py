"""Per-answer statistics: what speculation did and what it was worth.

A round is added to them in one place, RoundEvent.apply_to (engine/decoding/events.py), by the
engine and by the app's live view alike; the estimated speedup is one formula, plain_s ÷ gen_s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace

from engine.config import DrafterKind


@dataclass(frozen=True)
class Round:
    """One verification round, as an answer keeps it (stored as [drafter, draft_length, drafted, accepted])."""

    drafter: DrafterKind
    draft_length: int  # asked of the drafter this round (0: nothing drafted)
    drafted: int  # tokens it proposed (the draft model may stop early)
    accepted: int  # of those, kept by the target

    def __post_init__(self):
        object.__setattr__(self, "drafter", DrafterKind(self.drafter))

    @classmethod
    def of(cls, value: Round | Iterable | Mapping) -> Round:
        """A round from what was stored: a Round, a list or tuple in field order (every stored
        answer so far), or a mapping by field name."""
        if isinstance(value, Round):
            return value
        if isinstance(value, Mapping):
            return cls(**{name: value[name] for name in cls.__dataclass_fields__})
        return cls(*value)

    def to_json(self) -> list:
        return [self.drafter.value, self.draft_length, self.drafted, self.accepted]


@dataclass
class DrafterTally:
    """One drafter's rounds over an answer."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_length_sum: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_draft_length(self) -> float:
        return self.draft_length_sum / self.rounds if self.rounds else 0.0


@dataclass
class AnswerStats:
    n_prompt_tokens: int = 0  # tokens in the formatted conversation
    n_prompt_evaluated: int = 0  # of those, evaluated now (the rest came from the KV cache)
    n_history_dropped: int = 0  # messages dropped from the front to fit the context
    n_results_cut: int = 0  # tool results whose middle was left out to fit the context (engine.decoding.fitting)
    n_tokens: int = 0  # tokens in the answer (its thinking included)
    n_reasoning_tokens: int = 0  # of those, the thinking's (a reasoning model's <think> block, markers included)
    n_rounds: int = 0  # verification rounds (plain steps count as rounds with nothing drafted)
    n_drafted: int = 0
    n_accepted: int = 0
    accepted_hist: dict[int, int] = field(default_factory=dict)  # accepted length -> rounds, drafted rounds only
    rounds: list[Round] = field(default_factory=list)  # lists and tuples in field order are read as Rounds
    tokens_by_source: dict[str, int] = field(default_factory=dict)
    ttft_s: float = 0.0  # request to first token shown
    prompt_s: float = 0.0  # prompt evaluation
    gen_s: float = 0.0  # start of generation (after the prompt) to the end of the last round
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_sample: float = 0.0
    target_step_s: float = 0.0  # the target's measured single-token decode time on this machine
    reasoning_s: float = 0.0  # first round to the end of the thinking
    plain_estimate_s: float = 0.0  # what plain decoding would have taken for these tokens (see below)
    backend: str = ""
    plain_reason: str = ""  # why this answer was decoded plainly whatever the settings (a model that cannot roll back)
    # An answer computed by a remote server: its figures as plain data (source, n_drafted, n_accepted,
    # acceptance_rate, server_tps, client_tps, client_ttft_s, note, host); empty for a local answer.
    remote: dict = field(default_factory=dict)
    # The seed the answer was sampled with (the one asked for, or one drawn for it; None at temperature 0): plain
    # decoding with it draws the same tokens as lookup, history and documents drafting did (sampling.Draws).
    seed: int | None = None
    grammar_s: float = 0.0  # spent constraining tool calls with their grammar (engine/decoding/tool_grammar.py)
    n_grammar_rows: int = 0  # verified positions the grammar looked at

    def __post_init__(self):
        self.rounds = [Round.of(r) for r in self.rounds]

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        drafted_rounds = sum(self.accepted_hist.values())
        return self.n_accepted / drafted_rounds if drafted_rounds else 0.0

    @property
    def prompt_tps(self) -> float:
        return self.n_prompt_evaluated / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def gen_tps(self) -> float:
        return self.n_tokens / self.gen_s if self.gen_s > 0 else 0.0

    @property
    def plain_s(self) -> float:
        """What plain decoding would have taken for these tokens: the estimate's numerator.

        README's formula: one single-token step per token, each round's tokens priced from that
        round's own measured verification time by the machine's step/batch cost ratio (the
        engine prices a round in RoundEvent.plain_s; apply_to sums them into plain_estimate_s),
        so a machine that is busier now than at calibration does not inflate the figure, and never above
        the median of the answer's recent plain steps (after a long prompt a wide batch grows dearer than a
        step, which the calibration's ratio does not know until the context's cost is learned); and per
        token what a plain step costs beyond its decode (sampling, the text layer, the reader of the
        events: CostModel.plain_overhead_s), which plain decoding pays too. The
        token that ends the answer counts: plain decoding pays a step for it too. Answers stored
        before rounds were priced fall back to n_tokens × the calibrated single-token step.
        """
        return self.plain_estimate_s if self.plain_estimate_s > 0 else self.n_tokens * self.target_step_s

    @property
    def estimated_speedup(self) -> float:
        """plain_s ÷ gen_s: an estimate. The benchmark, and Compare in the app, measure the real ratio."""
        return self.plain_s / self.gen_s if self.gen_s > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["accepted_hist"] = {str(k): v for k, v in sorted(self.accepted_hist.items())}
        d["rounds"] = [r.to_json() for r in self.rounds]  # the stored shape since the first release
        d.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            prompt_tps=self.prompt_tps,
            gen_tps=self.gen_tps,
            estimated_speedup=self.estimated_speedup,
        )
        return d

    @classmethod
    def from_dict(cls, d: dict) -> AnswerStats:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["accepted_hist"] = {int(k): v for k, v in known.get("accepted_hist", {}).items()}
        return cls(**known)  # rounds: stored lists become Rounds in __post_init__

    def then(self, later: AnswerStats) -> AnswerStats:
        """One answer made of passes (a tool turn: the model, a tool, the model again): these figures
        followed by a later pass's. Counts, rounds and times add up (gen_s is the passes' decoding, not
        the tools' time), so tok/s and the speedup are the whole answer's; the prompt's size is the last
        pass's (the whole conversation by then), the time to the first token the first pass's."""
        hist = dict(self.accepted_hist)
        for length, n in later.accepted_hist.items():
            hist[length] = hist.get(length, 0) + n
        sources = dict(self.tokens_by_source)
        for source, n in later.tokens_by_source.items():
            sources[source] = sources.get(source, 0) + n
        added = (
            *("n_prompt_evaluated", "n_tokens", "n_reasoning_tokens", "n_rounds", "n_drafted", "n_accepted"),
            *("prompt_s", "gen_s", "t_draft", "t_verify", "t_sample", "reasoning_s", "plain_estimate_s"),
            *("grammar_s", "n_grammar_rows"),
        )
        return replace(
            later,
            **{name: getattr(self, name) + getattr(later, name) for name in added},
            n_history_dropped=max(self.n_history_dropped, later.n_history_dropped),
            n_results_cut=max(self.n_results_cut, later.n_results_cut),
            accepted_hist=hist,
            rounds=self.rounds + later.rounds,
            tokens_by_source=sources,
            ttft_s=self.ttft_s,
            plain_reason=later.plain_reason or self.plain_reason,
        )

    def by_drafter(self) -> dict[DrafterKind, DrafterTally]:
        """Each drafter's rounds, drafted and accepted tokens (plain steps under DrafterKind.NONE)."""
        tallies: dict[DrafterKind, DrafterTally] = {}
        for r in self.rounds:
            t = tallies.setdefault(r.drafter, DrafterTally())
            t.rounds += 1
            t.drafted += r.drafted
            t.accepted += r.accepted
            t.draft_length_sum += r.draft_length
        return tallies

    def count_sources(self, sources: Counter) -> None:
        self.tokens_by_source = dict(sources)

    def summary(self) -> str:
        """One line for the terminal and the status bar."""
        parts = [
            f"{self.n_tokens} tokens",
            f"{self.gen_tps:.1f} tok/s",
            f"TTFT {self.ttft_s * 1000:.0f} ms",
        ]
        if self.n_drafted:
            parts.append(f"accepted {self.n_accepted}/{self.n_drafted} ({self.acceptance_rate:.0%})")
            parts.append(f"mean accepted {self.mean_accepted_length:.2f}/round")
        parts.append(f"speedup ~{self.estimated_speedup:.2f}x (est.)")
        if self.n_prompt_tokens:
            parts.append(f"prompt {self.n_prompt_evaluated}/{self.n_prompt_tokens} evaluated")
        return " · ".join(parts)
