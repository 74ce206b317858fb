"""Two fake models that write text in different vocabularies, for drafting across them.

Both score text with one character model (the next character's distribution depends on
the last two characters, exact numpy rows from a seed); a token's logit is the log
probability of its characters in turn. So the target's distribution is a function of the
text, whatever tokens wrote it, and a draft of the same character model writes text the
target often agrees with, in tokens of its own. `FakeTextVocab` is the engine's TextVocab
over a list of pieces (greedy longest-match tokenizing; control pieces are never matched).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

from tests.support.fakes import FakeModel

ALPHABET = "abc "
# The target's pieces, then the draft's: different ids, different splits of the same text.
TARGET_PIECES = (b"a", b"b", b"c", b" ", b"ab", b"ba", b"c ", b" a", b"<|end|>")
DRAFT_PIECES = (b"<s>", b"c", b" ", b"a", b"b", b"abc", b"b ", b"ca", b"<|end|>", b"\xc3")
TARGET_CONTROL = frozenset({8})
DRAFT_CONTROL = frozenset({0, 8})


@cache
def _char_logprobs(seed: int, tail: str) -> dict[str, float]:
    rng = np.random.default_rng([seed, *(ord(c) for c in tail.rjust(2, "\0"))])
    z = rng.standard_normal(len(ALPHABET)) * 1.5
    z = z - np.log(np.exp(z - z.max()).sum()) - z.max()
    return dict(zip(ALPHABET, z.tolist(), strict=True))


@cache
def _token_logits(seed: int, tail: str, pieces: tuple[bytes, ...],
                  control: frozenset[int]) -> np.ndarray:
    out = np.full(len(pieces), -np.inf, dtype=np.float32)
    for t, piece in enumerate(pieces):
        text = piece.decode("utf-8", errors="replace")
        if t in control or any(c not in ALPHABET for c in text):
            continue
        seen, total = tail, 0.0
        for c in text:
            total += _char_logprobs(seed, seen[-2:])[c]
            seen += c
        out[t] = total
    out.setflags(write=False)
    return out


class FakeTextVocab:
    """TextVocab over `pieces`: plain text tokenized by longest match."""

    def __init__(self, pieces: Sequence[bytes], control: frozenset[int],
                 bos: int | None = None) -> None:
        self.pieces = list(pieces)
        self.controls = control
        self.bos = bos
        self.tokenized: list[str] = []  # every text tokenize() was given, in order

    def piece(self, token: int) -> bytes:
        return self.pieces[token]

    def is_control(self, token: int) -> bool:
        return token in self.controls

    def control(self, text: bytes) -> int | None:
        return next((t for t in self.controls if self.pieces[t] == text), None)

    def tokenize(self, text: str) -> list[int]:
        self.tokenized.append(text)
        data, out, i = text.encode("utf-8"), [], 0
        plain = [t for t in range(len(self.pieces)) if t not in self.controls]
        while i < len(data):
            best = max((t for t in plain if data.startswith(self.pieces[t], i)),
                       key=lambda t: len(self.pieces[t]), default=None)
            if best is None:  # a byte no piece starts with: skipped, as an unknown token
                i += 1
                continue
            out.append(best)
            i += len(self.pieces[best])
        return out


def text_model(pieces: Sequence[bytes], control: frozenset[int], seed: int = 5,
               eog: Sequence[int] = (), n_ctx: int = 512) -> FakeModel:
    """A FakeModel whose next-token logits are the character model's, over `pieces`."""
    frozen = tuple(pieces)

    def logits(context: Sequence[int]) -> np.ndarray:
        text = b"".join(frozen[t] for t in context if t not in control)
        tail = text[-8:].decode("utf-8", errors="replace")[-2:]
        return _token_logits(seed, tail, frozen, control)

    return FakeModel(len(frozen), pieces=list(frozen), logits_fn=logits, eog=eog, n_ctx=n_ctx)


def pair(seed: int = 5, draft_seed: int | None = None
         ) -> tuple[FakeModel, FakeModel, FakeTextVocab, FakeTextVocab]:
    """(target, draft, target's vocabulary, draft's): the draft uses its own seed if given
    (a worse guesser), else the target's character model."""
    target = text_model(TARGET_PIECES, TARGET_CONTROL, seed, eog=[8])
    draft = text_model(DRAFT_PIECES, DRAFT_CONTROL,
                       seed if draft_seed is None else draft_seed, eog=[8])
    return (target, draft, FakeTextVocab(TARGET_PIECES, TARGET_CONTROL),
            FakeTextVocab(DRAFT_PIECES, DRAFT_CONTROL, bos=0))
