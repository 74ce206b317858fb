"""Several candidates in one verify: a tree of drafted tokens and the rule that keeps exactly
the target's distribution when a node has more than one child.

A TreeDraft's nodes are listed parents first; node i hangs under `parents[i]` (-1: under the
last committed token, the root). The target evaluates [root, *nodes] in one batch in which
every token sees only its own ancestors (engine.protocol.TreeModel), so batch row 0 is the
target's distribution after the committed context and row i + 1 the one after the path to
node i. Acceptance walks from the root:

- temperature 0: the target's choice at the current node; if a child holds it, go there;
  otherwise that choice is the step's new token. Equal to the target's own greedy decoding.
- temperature > 0: recursive rejection over the children (SpecInfer, Miao et al. 2023): try
  the children in turn, accepting child x with probability min(1, r(x)/q(x)) where r starts
  as the target's row p and, after each rejection, becomes norm(max(0, r - q)); if every child
  is rejected, the new token is drawn from the last r. q is the distribution a child was drawn
  from (None: a deterministic proposal, one-hot). The token that leaves a node then has
  exactly the distribution p, whatever the candidates were, so the answer has the target's
  distribution (tests/engine/test_tree.py proves it by chi-square, with a wrong rule that must
  fail).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specchat.engine.acceptance import residual
from specchat.engine.options import SamplingOptions
from specchat.engine.sampling import greedy_token, probs, recent_window, sample


@dataclass(frozen=True)
class TreeDraft:
    """Drafted tokens as a tree, parents before children; `source` names the drafter and
    `expected_speedup` is what it expects the tree to yield (as drafters.Draft's)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    source: str = ""
    expected_speedup: float | None = None
    _children: dict[int, list[int]] = field(default_factory=dict, init=False, repr=False,
                                            compare=False)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("a tree draft needs one parent per token")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"node {i} has parent {p}: parents must come first")
            self._children.setdefault(p, []).append(i)
        for kids in self._children.values():
            if len({self.tokens[c] for c in kids}) != len(kids):
                raise ValueError("siblings in a tree draft must be different tokens")

    def children(self, node: int) -> list[int]:
        """Nodes directly under `node` (-1: the root), in draft order."""
        return self._children.get(node, [])

    @property
    def depth(self) -> int:
        """Nodes on the longest root-to-leaf path."""
        depths: list[int] = []
        for p in self.parents:
            depths.append(1 if p < 0 else depths[p] + 1)
        return max(depths, default=0)

    def batch(self, last: int) -> tuple[list[int], list[int]]:
        """The verify batch [last, *tokens] and each row's parent row (-1 for row 0)."""
        return [last, *self.tokens], [-1, *(p + 1 for p in self.parents)]

    def path_tokens(self, path: Sequence[int]) -> list[int]:
        return [self.tokens[i] for i in path]

    def cut(self, n: int) -> TreeDraft:
        """The first n nodes: still a tree, since parents come before their children."""
        if n >= len(self.tokens):
            return self
        return TreeDraft(self.tokens[:n], self.parents[:n], self.source)


def accept_candidates(p: np.ndarray, candidates: Sequence[int],
                      q: Sequence[np.ndarray | None] | None, rng: np.random.Generator
                      ) -> tuple[int | None, np.ndarray]:
    """Recursive rejection over one node's candidates. Returns (index of the accepted
    candidate, or None when all were rejected; the residual r at that point, which is what
    the new token is drawn from when none was accepted).

    q[i] is the distribution candidate i was drawn from (None or q None: one-hot). For
    one-hot candidates this accepts x with probability r(x) and else removes x from r, which
    is drawing from p one candidate at a time.
    """
    r = p
    for i, x in enumerate(candidates):
        qi = None if q is None else q[i]
        q_x = 1.0 if qi is None else float(qi[x])
        # u < r/q written as u*q < r: no division, and r(x) == q(x) accepts surely.
        if rng.random() * q_x < r[x]:
            return i, r
        r = residual(r, qi, x)
    return None, r


Rows = Callable[[int], np.ndarray]  # batch row -> the target's logits there


def accept_tree(rows: Rows, draft: TreeDraft, recent_base: Sequence[int],
                opts: SamplingOptions, rng: np.random.Generator) -> tuple[list[int], int]:
    """Walk the tree as the target decides. Returns (the accepted nodes, root first, and the
    token that follows them). `recent_base` is the committed window the repeat penalty
    sees; the path so far is added to it row by row, as if it were already committed."""
    n_recent = opts.repeat_last_n if opts.repeat_penalty != 1.0 else 0
    path: list[int] = []
    node = -1
    while True:
        recent = recent_window(recent_base, draft.path_tokens(path), n_recent)
        logits = rows(node + 1)
        kids = draft.children(node)
        if opts.greedy:
            token = greedy_token(logits, recent, opts)
            nxt = next((c for c in kids if draft.tokens[c] == token), None)
            if nxt is None:
                return path, token
        else:
            p = probs(logits, recent, opts)
            picked, rest = accept_candidates(p, [draft.tokens[c] for c in kids], None, rng)
            if picked is None:
                return path, sample(rest, rng)
            nxt = kids[picked]
        path.append(nxt)
        node = nxt
