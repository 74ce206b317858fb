"""What the decode loop yields: small immutable events, so consumers cannot disturb it."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.stats import Stats


@dataclass(frozen=True)
class Chunk:
    """One verify step's worth of output (or the last held-back text at the end).

    `text` is new printable text: whole UTF-8 characters, never any part of a stop string,
    never the rendering of an end-of-generation token. It may be "" while text is held back.
    """

    text: str
    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]  # per token: a drafted token the target accepted
    stats: Stats


@dataclass(frozen=True)
class Finished:
    """The answer is over. `reason`: "eog", "length", "stop" or "context".

    `tokens` are all generated tokens that count as the answer (an eog token that ended it
    included; tokens after a stop string's end dropped). `text` is the whole printed answer.
    """

    reason: str
    text: str
    tokens: tuple[int, ...]
    stats: Stats


@dataclass(frozen=True)
class Progress:
    """How far the prompt's prefill is: `done` of `total` tokens evaluated, `seconds` since
    the prefill started. Handed to a callback, not yielded: it comes before any Chunk."""

    done: int
    total: int
    seconds: float


Event = Chunk | Finished
