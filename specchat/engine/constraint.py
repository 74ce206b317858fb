"""Constrained decoding: a grammar the answer must follow, as one more warp on p and q alike.

The engine owns the interface (Constraint); what implements it (llguidance behind
specchat/llm/grammar.py, a finite automaton in the tests) stays outside. A constraint follows
the committed answer: it says which tokens may come next, takes in tokens, and gives them
back.

Why speculation stays exact. The mask for a position is a function of the tokens before it,
so it is the same whether the target or the draft looks at that position; `sampling.biased`
applies it to both rows before every other warp. Row i of a verify step is masked with the
constraint advanced through d1..d_i (StepMasks), so p is exactly the distribution plain
constrained decoding samples from at that position, and a draft model samples from q masked
the same way (drafters.DraftModelDrafter), so q is what it really drew from. The rejection
rule then emits tokens with p's distribution, word for word as without a grammar.

Drafts are cut at the first token the grammar forbids before they are verified
(policy.GuidedPolicy). For a proposal that is a function of the context (prompt lookup, the
grammar's own forced tokens) the cut is a function of the context too, so nothing changes. A draft
model never proposes a forbidden token, since its q is masked. Masking only p would not do:
the draft would propose forbidden tokens with q's unmasked weight, the cut would turn those
steps into plain ones, and the emitted distribution would lean towards plain sampling
(tests/engine/test_constraint_exact.py shows it fail).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class ConstraintError(Exception):
    """The grammar cannot go on (a token it forbids was committed, or it broke)."""


class Constraint(Protocol):
    """A grammar's state over the tokens taken in so far (the answer's, plus any a step has
    advanced through and not yet rolled back)."""

    def allowed(self) -> np.ndarray:
        """A boolean mask over the target's token ids: which may come next. Never all False
        (a finished grammar allows the end-of-generation tokens)."""
        ...

    def advance(self, tokens: Sequence[int]) -> None:
        """Take in tokens; ConstraintError if the grammar forbids one (nothing is taken then
        from that one on)."""
        ...

    def rollback(self, n: int) -> None:
        """Give back the last n tokens taken in."""
        ...

    def allows(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the grammar allows from here (no change)."""
        ...

    def forced(self, limit: int) -> Sequence[int]:
        """Up to `limit` tokens the grammar fixes from here (a free draft; may be empty)."""
        ...

    def complete(self) -> bool:
        """Whether what was taken in so far is a whole sentence of the grammar."""
        ...


class StepMasks:
    """The masks of one verify step's rows: row i is the constraint after draft[:i].

    Rows are asked for in increasing order (acceptance stops at the first rejection), so the
    constraint is advanced lazily; `settle` gives the draft tokens back, whatever happened.
    """

    def __init__(self, constraint: Constraint, draft: Sequence[int]) -> None:
        self.constraint = constraint
        self.draft = draft
        self.ahead = 0

    def __call__(self, i: int) -> np.ndarray:
        if i < self.ahead:
            self.constraint.rollback(self.ahead - i)
            self.ahead = i
        if i > self.ahead:
            self.constraint.advance(self.draft[self.ahead: i])
            self.ahead = i
        return self.constraint.allowed()

    def settle(self) -> None:
        if self.ahead:
            self.constraint.rollback(self.ahead)
            self.ahead = 0
