"""Turning token bytes into text without ever emitting half a character.

A token's piece is raw bytes: byte-level BPE vocabularies split one emoji or CJK character
across several tokens, so decoding each piece on its own would print replacement characters.
An incremental UTF-8 decoder holds an incomplete sequence back until the token that completes
it arrives. Pure: it only needs a `token -> bytes` function (LogitsModel.token_bytes).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable


class StreamDecoder:
    """Feed tokens one at a time, get back only complete characters."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        # errors="replace": bytes that can never form a character (a model may emit any token
        # in any order) become U+FFFD instead of an exception in the middle of an answer.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        """The text that became complete with this token (may be empty)."""
        return self._decoder.decode(self._token_bytes(token))

    def add_bytes(self, data: bytes) -> str:
        """Same as add, for raw bytes (tests and callers that already hold the piece)."""
        return self._decoder.decode(data)

    def flush(self) -> str:
        """Whatever is still held back, at the end of an answer (U+FFFD if it was incomplete)."""
        return self._decoder.decode(b"", final=True)

    @property
    def pending(self) -> bool:
        """True while an incomplete UTF-8 sequence is held back."""
        buffered, _ = self._decoder.getstate()
        return bool(buffered)

    def reset(self) -> None:
        """Drop anything held back (the answer was cut off or rolled back)."""
        self._decoder.reset()


def decode_pieces(pieces: Iterable[bytes]) -> str:
    """All pieces joined and decoded at once; replacement characters only for real garbage."""
    return b"".join(pieces).decode("utf-8", errors="replace")


def stream_text(tokens: Iterable[int], token_bytes: Callable[[int], bytes]) -> list[str]:
    """The chunks a StreamDecoder emits for `tokens`, the final flush included (may be empty)."""
    decoder = StreamDecoder(token_bytes)
    chunks = [decoder.add(t) for t in tokens]
    chunks.append(decoder.flush())
    return chunks
