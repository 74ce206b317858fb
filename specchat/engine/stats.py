"""Running statistics of one answer, as plain immutable data.

Acceptance is accepted / drafted over the steps that drafted something; steps that drafted
nothing are counted apart (`steps_empty`), so a drafter that rarely fires is not judged by
the steps where it did not try. `accepted` counts verification decisions, before any cut for
max_tokens or a stop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# What a remote server may not report about speculation (Stats.unknown).
SPECULATION = ("steps", "steps_drafted", "steps_empty", "drafted", "accepted")
# Figures computed from others (in to_dict()'s order), with the fields they need.
_DERIVED = {"acceptance": ("drafted", "accepted"), "tokens_per_step": ("steps",),
            "tokens_per_second": (), "mean_accepted": ("steps_drafted", "accepted"),
            "plain_token_seconds": (), "speedup_estimate": ("steps",),
            "prompt_evaluated": ("prompt_tokens",), "prompt_tokens_per_second": ("prompt_tokens",)}

# Fewer in-answer plain steps than this are too noisy to stand for plain decoding's cost
# (unless every step was plain): the calibrated cost is used instead.
MIN_PLAIN_STEPS = 4


class Rates:
    """Ratios recomputed from summed counts (never averaged), for one answer or a session."""

    generated: int
    steps: int
    drafted: int
    accepted: int
    decode_seconds: float

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_step(self) -> float:
        return self.generated / self.steps if self.steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass(frozen=True)
class Stats(Rates):
    mode: str = "off"
    prompt_tokens: int = 0
    prompt_cached: int = 0  # prompt tokens reused from the cache (not evaluated again)
    prompt_restored: int = 0  # of those, loaded from the on-disk prompt cache
    prompt_seconds: float = 0.0
    first_token_seconds: float = 0.0  # prefill start to the first answer token (0: none yet)
    generated: int = 0
    steps: int = 0  # target verify calls
    steps_drafted: int = 0
    steps_empty: int = 0
    drafted: int = 0
    accepted: int = 0
    drafted_by_position: tuple[int, ...] = ()  # [i]: steps whose draft had a token i
    accepted_by_position: tuple[int, ...] = ()  # [i]: steps whose token i was accepted
    accept_length_hist: tuple[int, ...] = ()  # [n]: drafted steps that accepted n tokens
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    sample_seconds: float = 0.0
    decode_seconds: float = 0.0  # wall time from the end of prefill
    last_k: int = 0  # tokens the last step drafted
    plain_step_seconds: float = 0.0  # calibrated cost of one plain target step (0: unknown)
    plain_steps: int = 0  # steps of this answer that verified one token and drafted none
    plain_seconds: float = 0.0  # their verify + sampling time, measured in this answer
    # Per drafter (engine.drafters: ngram, draft, store, grammar): (source, steps that
    # drafted from it, tokens drafted, tokens accepted). A tree step counts every node drafted.
    sources: tuple[tuple[str, int, int, int], ...] = ()
    # Fields nobody measured (a remote server that did not report them): shown as unknown,
    # and null in to_dict(), never as 0.
    unknown: tuple[str, ...] = ()

    def known(self, name: str) -> bool:
        """Whether a field (or a figure derived from fields) was measured."""
        return not any(n in self.unknown for n in (name, *_DERIVED.get(name, ())))

    @property
    def plain_token_seconds(self) -> float | None:
        """What one plain step (verify + sample) costs: measured in this answer when it took
        enough plain steps, else the calibrated step plus this answer's sampling per step."""
        if self.plain_steps and (self.plain_steps >= MIN_PLAIN_STEPS
                                 or self.plain_steps == self.steps):
            return self.plain_seconds / self.plain_steps
        if self.plain_step_seconds > 0 and self.steps:
            return self.plain_step_seconds + self.sample_seconds / self.steps
        return None

    @property
    def speedup_estimate(self) -> float | None:
        """This answer's decode time over what plain decoding would have taken here.

        Plain decoding = one plain step per token, plus the same time outside verify,
        drafting and sampling (detokenizing, streaming) that this answer spent: that part is
        mostly per token, so charging plain decoding no more than it keeps the figure low
        rather than flattering. `off` is its own baseline: exactly 1.
        """
        if not self.steps or self.decode_seconds <= 0:
            return None
        if self.mode == "off":
            return 1.0
        per_token = self.plain_token_seconds
        if per_token is None:
            return None
        outside = max(self.decode_seconds - self.verify_seconds - self.draft_seconds
                      - self.sample_seconds, 0.0)
        return (self.generated * per_token + outside) / self.decode_seconds

    @property
    def prompt_evaluated(self) -> int:
        """Prompt tokens the prefill evaluated (the last one goes with the first step)."""
        return max(self.prompt_tokens - 1 - self.prompt_cached, 0)

    @property
    def prompt_tokens_per_second(self) -> float | None:
        """Prompt processing speed; None when too little was evaluated to say."""
        if self.prompt_evaluated < 1 or self.prompt_seconds <= 0:
            return None
        return self.prompt_evaluated / self.prompt_seconds

    @property
    def mean_accepted(self) -> float | None:
        """Mean accepted length over the steps that drafted."""
        return self.accepted / self.steps_drafted if self.steps_drafted else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["sources"] = {name: {"steps": steps, "drafted": drafted, "accepted": accepted}
                          for name, steps, drafted, accepted in self.sources}
        for name in _DERIVED:
            out[name] = getattr(self, name)
        for name in out:
            if name != "unknown" and not self.known(name):
                out[name] = None
        return out

    def but(self, **changes: Any) -> Stats:
        """These statistics with `changes`: dataclasses.replace without its per-call walk of
        every field's metadata, which cost the decode loop ~10 us a call, several a step."""
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"Stats has no field {sorted(unknown)[0]!r}")
        out = object.__new__(Stats)
        out.__dict__.update(self.__dict__)
        out.__dict__.update(changes)
        return out

    def with_step(self, drafted: int, accepted: int, source: str = "",
                  draft_seconds: float = 0.0, verify_seconds: float = 0.0,
                  sample_seconds: float = 0.0) -> Stats:
        """These statistics and one more verify call; a plain step's verify and sampling
        time also count as plain decoding's measured cost."""
        changes: dict[str, Any] = {
            "steps": self.steps + 1, "draft_seconds": self.draft_seconds + draft_seconds,
            "verify_seconds": self.verify_seconds + verify_seconds,
            "sample_seconds": self.sample_seconds + sample_seconds}
        if drafted == 0:
            changes.update(steps_empty=self.steps_empty + 1, plain_steps=self.plain_steps + 1,
                           plain_seconds=self.plain_seconds + verify_seconds + sample_seconds)
            return self.but(**changes)
        if source:
            counts = {name: (steps, d, a) for name, steps, d, a in self.sources}
            steps, d, a = counts.get(source, (0, 0, 0))
            counts[source] = (steps + 1, d + drafted, a + accepted)
            changes["sources"] = tuple((name, *c) for name, c in sorted(counts.items()))
        return self.but(
            **changes, steps_drafted=self.steps_drafted + 1, drafted=self.drafted + drafted,
            accepted=self.accepted + accepted,
            drafted_by_position=_counted(self.drafted_by_position, drafted, range(drafted)),
            accepted_by_position=_counted(self.accepted_by_position, drafted, range(accepted)),
            accept_length_hist=_counted(self.accept_length_hist, drafted + 1,
                                        range(accepted, accepted + 1)))


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Stats))


def _counted(values: tuple[int, ...], size: int, ones: range) -> tuple[int, ...]:
    """`values` grown to `size` with zeros, plus one at each index in `ones`."""
    out = [*values, *[0] * (size - len(values))]
    for i in ones:
        out[i] += 1
    return tuple(out)
