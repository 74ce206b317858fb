"""Statistics over a whole chat session, summed from each answer's engine Stats.

Per-answer Stats already hold ratios; a session figure must be recomputed from the summed
counts (acceptance = accepted / drafted over all answers), never averaged over answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.stats import Rates, Stats


def _as_counts(value: Any) -> dict[int, int]:
    """Per-position or per-length counts, whether the engine gives a sequence or a mapping."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {int(k): int(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return {i: int(v) for i, v in enumerate(value)}
    return {}


def _add(into: dict[int, int], counts: dict[int, int]) -> None:
    for key, n in counts.items():
        into[key] = into.get(key, 0) + n


@dataclass
class PromptTiming:
    """How long one turn's prompt took to evaluate: the KV-reuse evidence."""

    turn: int
    tokens: int
    cached: int  # of `tokens`, how many the KV cache already held
    seconds: float


@dataclass
class Tally(Rates):
    answers: int = 0
    interrupted: int = 0
    generated: int = 0
    steps: int = 0
    steps_drafted: int = 0
    steps_empty: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    sample_seconds: float = 0.0
    accepted_by_position: dict[int, int] = field(default_factory=dict)
    drafted_by_position: dict[int, int] = field(default_factory=dict)
    accept_length_hist: dict[int, int] = field(default_factory=dict)
    prompts: list[PromptTiming] = field(default_factory=list)
    modes: dict[str, int] = field(default_factory=dict)
    unmeasured: int = 0  # answers whose server did not report its steps

    def add(self, stats: Stats, interrupted: bool = False) -> None:
        self.answers += 1
        self.unmeasured += int("steps" in (getattr(stats, "unknown", ()) or ()))
        self.interrupted += int(interrupted)
        for name in ("generated", "steps", "steps_drafted", "steps_empty", "drafted",
                     "accepted"):
            setattr(self, name, getattr(self, name) + int(getattr(stats, name, 0) or 0))
        for name in ("decode_seconds", "draft_seconds", "verify_seconds", "sample_seconds"):
            setattr(self, name, getattr(self, name) + float(getattr(stats, name, 0.0) or 0.0))
        _add(self.accepted_by_position, _as_counts(getattr(stats, "accepted_by_position", None)))
        _add(self.drafted_by_position, _as_counts(getattr(stats, "drafted_by_position", None)))
        _add(self.accept_length_hist, _as_counts(getattr(stats, "accept_length_hist", None)))
        mode = str(getattr(stats, "mode", "") or "?")
        self.modes[mode] = self.modes.get(mode, 0) + 1
        self.prompts.append(PromptTiming(self.answers, stats.prompt_tokens, stats.prompt_cached,
                                         stats.prompt_seconds))

    def position_rates(self) -> list[tuple[int, int, int]]:
        """(position, accepted, drafted) for every draft position that was ever tried."""
        return [(pos, self.accepted_by_position.get(pos, 0), n)
                for pos, n in sorted(self.drafted_by_position.items()) if n]

    def lines(self) -> list[str]:
        """The /stats report, plain text (the renderer adds colour where it may)."""
        if not self.answers:
            return ["no answers yet in this session"]
        acc = f"{self.acceptance:.0%}" if self.acceptance is not None else "n/a (nothing drafted)"
        modes = ", ".join(f"{m} x{n}" for m, n in self.modes.items())
        out = [
            f"answers      {self.answers} ({self.interrupted} interrupted); modes: {modes}",
            f"generated    {self.generated} tokens in {self.decode_seconds:.2f}s "
            f"({self.tokens_per_second:.1f} tok/s)",
            f"target steps {self.steps} ({self.steps_drafted} with a draft, "
            f"{self.steps_empty} drafted nothing); {self.tokens_per_step:.2f} tokens/step",
            f"acceptance   {self.accepted}/{self.drafted} drafted tokens = {acc}",
        ]
        if self.unmeasured == self.answers:
            out[2:] = ["target steps unknown: the server did not report them"]
        out += [
            f"time split   draft {self.draft_seconds:.2f}s · verify {self.verify_seconds:.2f}s"
            f" · sample {self.sample_seconds:.2f}s",
        ]
        rates = self.position_rates()[:12]
        if rates:
            # The engine counts positions from index 0 = the first drafted token.
            cells = [f"{pos + 1}: {a / n:.0%} ({a}/{n})" for pos, a, n in rates]
            out.append("by position  " + "  ".join(cells))
        hist = [(k, v) for k, v in sorted(self.accept_length_hist.items()) if v]
        if hist:
            out.append("accepted per drafted step (length x steps)  "
                       + "  ".join(f"{k}x{v}" for k, v in hist))
        timings = "  ".join(f"#{p.turn} {p.tokens - p.cached} new/{p.tokens} tok "
                            f"{p.seconds * 1000:.0f} ms" for p in self.prompts[-8:])
        out.append(f"prompt eval  {timings}")
        return out
