"""Stop strings found in a growing text with work that does not grow with how many there are.

An Aho-Corasick automaton over the stop strings, fed one token's text at a time. Its state
is the longest end of the text read that begins some stop string: it says whether a stop
string just ended (and where), and how much text to hold back. Failure moves never outnumber
the characters read, so the work per token is bounded by its characters, not by the number
or size of the stop strings.

Hand-written because the state must carry over from one token to the next and say how deep
it is (the hold-back); the well-kept C automata scan whole strings and report matches only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

ROOT = 0


class StopMatcher:
    """Feed text in order; `feed` says where a stop string that ended in it began."""

    def __init__(self, stops: Iterable[str]) -> None:
        self._goto: list[dict[str, int]] = [{}]
        self._fail: list[int] = [ROOT]
        self._depth: list[int] = [0]
        self._longest: list[int] = [0]  # the longest stop string ending at a state (0: none)
        for stop in set(stops):
            if stop:
                self._insert(stop)
        self._link()
        self.state = ROOT
        self.work = 0  # moves made so far, forward and failure (what a test counts)

    @property
    def held(self) -> int:
        """How many of the last characters could still be the start of a stop string."""
        return self._depth[self.state]

    def feed(self, text: str) -> int | None:
        """Read `text`, the characters after everything read before. Returns where the
        earliest-starting stop string that ends within `text` starts, counted from the start
        of `text` (negative: it began in text read before), or None when none ends in it."""
        earliest: int | None = None
        state = self.state
        for i, ch in enumerate(text):
            state = self._next(state, ch)
            found = self._longest[state]
            if found:
                start = i + 1 - found
                earliest = start if earliest is None else min(earliest, start)
        self.state = state
        return earliest

    def _next(self, state: int, ch: str) -> int:
        while True:
            self.work += 1
            nxt = self._goto[state].get(ch)
            if nxt is not None:
                return nxt
            if state == ROOT:
                return ROOT
            state = self._fail[state]

    def _insert(self, stop: str) -> None:
        state = ROOT
        for ch in stop:
            nxt = self._goto[state].get(ch)
            if nxt is None:
                nxt = len(self._goto)
                self._goto.append({})
                self._fail.append(ROOT)
                self._depth.append(self._depth[state] + 1)
                self._longest.append(0)
                self._goto[state][ch] = nxt
            state = nxt
        self._longest[state] = len(stop)

    def _link(self) -> None:
        """Failure links breadth-first: a state's is the longest proper end of its text
        that is also a state; a state that ends no stop itself ends its failure's longest."""
        queue = deque(self._goto[ROOT].values())
        while queue:
            state = queue.popleft()
            for ch, child in self._goto[state].items():
                fail = self._fail[state]
                while fail != ROOT and ch not in self._goto[fail]:
                    fail = self._fail[fail]
                self._fail[child] = self._goto[fail].get(ch, ROOT)
                if not self._longest[child]:
                    self._longest[child] = self._longest[self._fail[child]]
                queue.append(child)
