"""Which drafted tokens the target keeps, and the token it adds: pure functions.

Rows are asked for lazily (row i is the target distribution after d1..d_i), because after a
rejection the remaining rows are never needed and warping a 150k-entry row costs time.
A row source is an array (or sequence) of rows, or a function from row index to row.

Sampled acceptance is the rejection rule of Leviathan et al. / Chen et al.: accept d_i with
probability min(1, p(d_i)/q(d_i)); on rejection draw from norm(max(0, p - q)) and stop; if all
are accepted draw a bonus token from the row after the last draft. The emitted tokens then
have exactly the target's distribution, whatever q is, provided q is the distribution d_i
was really drawn from. A one-hot q (prompt lookup) is passed as None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specchat.engine.sampling import sample

RowSource = np.ndarray | Sequence[np.ndarray] | Callable[[int], np.ndarray]
TokenSource = Sequence[int] | Callable[[int], int]


def _rows(source: RowSource) -> Callable[[int], np.ndarray]:
    return source if callable(source) else source.__getitem__


def accept_greedy(target: TokenSource, draft: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: keep drafts while they equal the target's argmax.

    `target(i)` is the target's choice after d1..d_i. Returns (number accepted, the token
    that follows them: the target's correction at the first mismatch, else the bonus).
    """
    choice = target if callable(target) else target.__getitem__
    for i, d in enumerate(draft):
        t = choice(i)
        if t != d:
            return i, t
    return len(draft), choice(len(draft))


def residual(p: np.ndarray, q: np.ndarray | None, token: int) -> np.ndarray:
    """norm(max(0, p - q)): where to draw from after `token` was rejected.

    With a one-hot q on `token` that is p with `token` removed, renormalized.
    """
    if q is None:
        r = p.copy()
        r[token] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = r.sum()
    if total <= 0.0:
        # Only reachable through float round-off when p == q; then p is the right answer.
        return p
    return r / total


def accept_sampled(p: RowSource, draft: Sequence[int], q: RowSource | None,
                   rng: np.random.Generator) -> tuple[int, int]:
    """Temperature > 0: the rejection rule. Returns (number accepted, the next token).

    `p` has len(draft) + 1 rows; `q` has one row per draft token, or is None for one-hot
    proposals. Uses one uniform per examined draft token plus one draw for the next token.
    """
    p_row = _rows(p)
    q_row = None if q is None else _rows(q)
    for i, d in enumerate(draft):
        pi = p_row(i)
        qi = None if q_row is None else q_row(i)
        q_d = 1.0 if qi is None else float(qi[d])
        # u < p/q written as u*q < p: no division, and p == q accepts with certainty
        # because u < 1.
        if rng.random() * q_d < pi[d]:
            continue
        return i, sample(residual(pi, qi, d), rng)
    return len(draft), sample(p_row(len(draft)), rng)
