"""Token bytes to printable text: whole UTF-8 characters only, stop strings never shown.

A token may end in the middle of a UTF-8 character, and a stop string may be split over
several tokens, so text is released only once it is certain: incomplete characters wait
for their remaining bytes, and any tail that could still grow into a stop string is held back.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from specchat.engine.stops import StopMatcher


class TextStream:
    """Feed token bytes in order; get back the text that is safe to print."""

    def __init__(self, stops: Sequence[str] = ()) -> None:
        self._matcher = StopMatcher(stops)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # decoded, but could be the start of a stop string
        self.stopped = False
        self.text = ""  # everything released so far

    def push(self, data: bytes) -> str:
        """Add one token's bytes; return newly printable text. Sets `stopped` when a stop
        string completes (the text before it is returned, the rest is dropped)."""
        if self.stopped:
            return ""
        new = self._decoder.decode(data)
        pending = self._held + new
        start = self._matcher.feed(new)
        if start is not None:  # the earliest stop string: it may have begun in what was held
            self.stopped = True
            cut = len(self._held) + start
            self._held = ""
            return self._release(pending[:cut])
        # The held text is always the matcher's depth: what could still begin a stop string.
        hold = self._matcher.held
        self._held = pending[len(pending) - hold:] if hold else ""
        return self._release(pending[: len(pending) - hold])

    @property
    def stop_work(self) -> int:
        """Moves the stop-string matcher has made (tests count work, never time)."""
        return self._matcher.work

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
