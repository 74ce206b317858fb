"""One options object that feeds sampling, speculation, the CLI flags and /set."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Spec(StrEnum):
    """How an answer speculates. A str, so it reads and prints as the flag value."""

    AUTO = "auto"  # per step: prompt lookup, the draft model or nothing, whichever pays
    DRAFT = "draft"  # always the draft model
    NGRAM = "ngram"  # always prompt lookup
    OFF = "off"  # plain decoding through the same loop: the honest baseline

    @property
    def uses_draft_model(self) -> bool:
        """Whether this mode drafts with a draft model (so one is loaded for it)."""
        return self in (Spec.AUTO, Spec.DRAFT)


SPEC_MODES: tuple[str, ...] = tuple(mode.value for mode in Spec)


# A request's stop strings: the text stream matches them in time independent of their number
# (engine/stops.py), but building the matcher and holding its states costs their total size.
# OpenAI takes 4; these are generous for any real use and bounded (docs/security.md).
MAX_STOPS = 256
MAX_STOP_CHARS = 16_384
RANDOM_SEED = -1  # --seed -1: a fresh random seed (the same as no seed)
# Below this a temperature is its limit, greedy: 1/T of the tiniest ones (1e-320) is infinite
# and sampling would divide by it into NaN, and already at 1e-8 any logit gap of 1e-6 or
# more leaves the runner-up under e^-100 of the top token (exact ties aside).
GREEDY_BELOW = 1e-8
# The repetition penalty divides positive logits and multiplies negative ones: outside this
# range a logit overflows (1e-320 makes a repeated token infinitely likely, NaN after), and
# no real use needs more.
PENALTY_RANGE = (0.01, 100.0)


class OptionError(ValueError):
    """An option value out of range; the message names the option and the allowed range."""


@dataclass(frozen=True)
class SamplingOptions:
    """How a token is chosen from logits. Target and draft use the very same warps."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = None  # None (or -1 on the way in): random
    # Added to the logits before every other warp, target and draft alike: (token id, bias)
    # pairs, ids unique and ascending (OpenAI's logit_bias; -100 all but bans a token).
    logit_bias: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        # NaN fails every comparison below; infinity would pass some (an infinite temperature
        # or penalty is no distribution at all), so finiteness is checked first, once, here.
        for name in ("temperature", "top_p", "min_p", "repeat_penalty"):
            _check(math.isfinite(getattr(self, name)), f"{name} must be a finite number")
        _check(self.temperature >= 0, "temperature must be >= 0 (0 is greedy)")
        _check(self.top_k >= 0, "top_k must be >= 0 (0 turns it off)")
        _check(0 < self.top_p <= 1, "top_p must be in (0, 1]")
        _check(0 <= self.min_p < 1, "min_p must be in [0, 1)")
        low, high = PENALTY_RANGE
        _check(low <= self.repeat_penalty <= high,
               f"repeat_penalty must be from {low:g} to {high:g} (1 turns it off)")
        _check(self.repeat_last_n >= 0, "repeat_last_n must be >= 0")
        _check(self.seed is None or self.seed >= RANDOM_SEED,
               f"seed must be >= 0, or {RANDOM_SEED} for a random seed")
        _check(all(int(t) >= 0 and (math.isfinite(b) or b == -math.inf)
                   for t, b in self.logit_bias), "logit_bias needs token ids >= 0 and "
               "finite biases (or -inf to ban a token)")
        bias = {int(t): float(b) for t, b in self.logit_bias}  # the last of a repeated id
        object.__setattr__(self, "logit_bias", tuple(sorted(bias.items())))
        if self.seed == RANDOM_SEED:
            # llama.cpp's convention, so scripts written for it keep working: -1 is random.
            object.__setattr__(self, "seed", None)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


STRUCTURE_KINDS = ("json", "json_schema", "grammar")


@dataclass(frozen=True)
class Structure:
    """What the answer's text must be. The backend compiles it into an engine Constraint
    (engine/constraint.py): "json" is any JSON object, "json_schema" one that validates
    against the schema in `text` (JSON), "grammar" a GBNF or Lark grammar in `text`."""

    kind: str
    text: str = ""
    # False: schema keywords the grammar cannot enforce (uniqueItems, not, ...) are ignored
    # rather than refused; the answer may then break only those.
    strict: bool = True

    def __post_init__(self) -> None:
        _check(self.kind in STRUCTURE_KINDS,
               f"output format must be one of {', '.join(STRUCTURE_KINDS)}")
        _check(self.kind == "json" or bool(self.text.strip()), f"{self.kind} needs its text")


@dataclass(frozen=True)
class GenerationOptions:
    """What one answer may do: length, stops, and how to speculate."""

    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    max_tokens: int = 1024
    stop: tuple[str, ...] = ()
    spec: Spec = Spec.AUTO
    draft_max: int = 16
    # Prompt lookup drafts only from an earlier n-gram match at least this long: 1-token
    # matches are mostly noise, and a rejected draft costs most of a step on CPUs
    # (docs/costs.md). `auto` uses at least 3.
    draft_min_match: int = 2
    structure: Structure | None = None  # a grammar the answer must follow (None: free text)
    # The target's log-probabilities of each emitted token and of its `logprobs` most likely
    # alternatives, in every Chunk (None: not computed, which costs nothing).
    logprobs: int | None = None

    def __post_init__(self) -> None:
        _check(self.max_tokens >= 1, "max_tokens must be >= 1")
        _check(self.spec in SPEC_MODES, f"spec must be one of {', '.join(SPEC_MODES)}")
        object.__setattr__(self, "spec", Spec(self.spec))  # "off" given as text is Spec.OFF
        _check(0 <= self.draft_max <= 64, "draft_max must be in [0, 64]")
        _check(all(self.stop), "stop strings must not be empty")
        _check(len(self.stop) <= MAX_STOPS, f"stop holds {len(self.stop)} strings; at most "
               f"{MAX_STOPS} are taken: send fewer")
        size = sum(map(len, self.stop))
        _check(size <= MAX_STOP_CHARS, f"stop strings hold {size} characters in all; at most "
               f"{MAX_STOP_CHARS} are taken: send shorter ones")
        _check(1 <= self.draft_min_match <= 16, "draft_min_match must be in [1, 16]")
        _check(self.logprobs is None or 0 <= self.logprobs <= 20, "logprobs must be in [0, 20]")

    def with_values(self, **values: Any) -> GenerationOptions:
        """A copy with some fields replaced; sampling fields may be given flat."""
        names = {f.name for f in dataclasses.fields(SamplingOptions)}
        samp = {k: v for k, v in values.items() if k in names}
        rest = {k: v for k, v in values.items() if k not in names}
        sampling = dataclasses.replace(self.sampling, **samp) if samp else self.sampling
        return dataclasses.replace(self, sampling=sampling, **rest)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise OptionError(message)
