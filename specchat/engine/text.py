"""Token bytes to printable text: whole UTF-8 characters only, stop strings never shown.

A token may end in the middle of a UTF-8 character, and a stop string may be split over
several tokens, so text is released only once it is certain: incomplete characters wait
for their remaining bytes, and any tail that could still grow into a stop string is held back.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    """Feed token bytes in order; get back the text that is safe to print."""

    def __init__(self, stops: Sequence[str] = ()) -> None:
        self.stops = tuple(s for s in stops if s)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # decoded, but could be the start of a stop string
        self.stopped = False
        self.text = ""  # everything released so far

    def push(self, data: bytes) -> str:
        """Add one token's bytes; return newly printable text. Sets `stopped` when a stop
        string completes (the text before it is returned, the rest is dropped)."""
        if self.stopped:
            return ""
        pending = self._held + self._decoder.decode(data)
        cut = self._first_stop(pending)
        if cut is not None:
            self.stopped = True
            self._held = ""
            return self._release(pending[:cut])
        hold = self._partial_stop(pending)
        self._held = pending[len(pending) - hold:] if hold else ""
        return self._release(pending[: len(pending) - hold])

    def flush(self, complete: bool = True) -> str:
        """The end of the answer: release what was held (a stop string that never
        completed is ordinary text). A character whose last bytes never came becomes U+FFFD,
        or is dropped when the answer was cut short (`complete` False: max_tokens, a full
        context), since the model would have finished it."""
        if self.stopped:
            return ""
        tail = b"" if complete else self._decoder.getstate()[0]
        rest = self._held + self._decoder.decode(b"", final=complete)
        if tail:
            self._decoder.reset()
        self._held = ""
        return self._release(rest)

    def _release(self, text: str) -> str:
        self.text += text
        return text

    def _first_stop(self, text: str) -> int | None:
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        return min(found) if found else None

    def _partial_stop(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
