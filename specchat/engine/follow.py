"""Following a copy through small edits: where an earlier span is being repeated.

Prompt lookup finds a copy through the n-gram that ends the context. One token the target
changes (a renamed variable, a fixed typo, a word dropped) breaks every n-gram through it, and
the lookup finds the copy again only some tokens later, after the match has been rebuilt:
those are plain steps in the middle of a long copy. A CopyFollower keeps the alignment
between the end of the context and its source, and steps over single-token substitutions and
deletions, so drafting can go on right after the edit. `span` counts the tokens the
alignment has matched: how much evidence there is that copying is going on.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_MISSES = 2  # edits tolerated within RECOVER matched tokens of each other
RECOVER = 8  # this many matches in a row forget the earlier edits


class CopyFollower:
    """The context's end aligned with an earlier position of the same context."""

    def __init__(self, source: int, span: int, at: int) -> None:
        self.source = source  # the position expected to repeat next
        self.span = span
        self.at = at  # context length the alignment has been followed to
        self.misses = 0
        self.run = 0  # matches since the last miss

    def follow(self, tokens: Sequence[int]) -> bool:
        """Follow tokens[at:]; False once the copy is lost."""
        while self.at < len(tokens):
            if self.source >= self.at:
                return False  # caught up with itself: nothing earlier to copy
            token = tokens[self.at]
            if tokens[self.source] == token:
                self.source += 1
                self.span += 1
                self.run += 1
                if self.run >= RECOVER:
                    self.misses = 0
            else:
                self.misses += 1
                self.run = 0
                if self.misses > MAX_MISSES:
                    return False
                # The target dropped one source token, else it replaced one.
                skipped = self.source + 1 < self.at and tokens[self.source + 1] == token
                self.source += 2 if skipped else 1
            self.at += 1
        return True

    def continuation(self, tokens: Sequence[int], k: int) -> Sequence[int]:
        return tokens[self.source: min(self.source + k, self.at)]
