"""What the decode loop yields: small immutable events, so consumers cannot disturb it."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

from specchat.engine.logprobs import TokenLogprob
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
    # Per token, the target's log-probabilities (only when GenerationOptions.logprobs is
    # set); an end-of-generation token, never rendered, has none.
    logprobs: tuple[TokenLogprob, ...] = ()


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


def follow(events: Generator[Event, None, None]) -> Generator[Chunk, None, Finished | None]:
    """The chunks of an answer stream; its Finished event is the generator's return value.

    The one loop every consumer (ask, chat, bench, a server) drains the engine with. However
    the consumer leaves (the end, Ctrl-C, an error of its own, closing this generator), the
    engine's stream is closed here and now, so its cleanup restores the KV caches while the
    models are still open, not later when the garbage collector gets to it.
    """
    finished: Finished | None = None
    try:
        for event in events:
            if isinstance(event, Chunk):
                yield event
            else:
                finished = event
    finally:
        events.close()
    return finished


def drain(events: Generator[Event, None, None],
          on_chunk: Callable[[Chunk], None] | None = None) -> Finished | None:
    """Run an answer stream to its end, handing each chunk to `on_chunk`; its Finished event.

    None when the stream ended without one. Exceptions (Ctrl-C included) propagate after the
    stream was closed.
    """
    stream = follow(events)
    try:
        while True:
            chunk = next(stream)
            if on_chunk is not None:
                on_chunk(chunk)
    except StopIteration as stop:
        result: Finished | None = stop.value
        return result
    finally:
        stream.close()
