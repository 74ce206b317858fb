"""How one llama_decode call is laid out: which rows of a batch get logits, and chunking.

Pure: the backend (model.py) applies these to llama.cpp's batch arrays.
"""

from __future__ import annotations

from collections.abc import Sequence


def normalize_rows(logit_rows: Sequence[int], n: int) -> list[int]:
    """Row indices into a batch of n tokens, negatives counted from the end."""
    rows = [int(r) + n if r < 0 else int(r) for r in logit_rows]
    bad = [r for r, norm in zip(logit_rows, rows, strict=True) if not 0 <= norm < n]
    if bad:
        raise IndexError(f"logit rows {bad} outside a batch of {n} tokens")
    return rows


def chunk_spans(n: int, size: int) -> list[tuple[int, int]]:
    """[lo, hi) spans of at most `size` covering range(n), in order."""
    if size <= 0:
        raise ValueError("batch size must be positive")
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def rows_in_span(rows: Sequence[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """(output index, index inside the chunk) for every requested row that falls in [lo, hi)."""
    return [(k, r - lo) for k, r in enumerate(rows) if lo <= r < hi]


def tree_layout(parents: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Depth and sequence ids of every row of a tree batch (row 0 the root, parents[0] = -1,
    parents[i] < i): each leaf is one sequence, and a row belongs to the sequences of the
    leaves below it, so it attends to exactly its ancestors (and the shared cache)."""
    n = len(parents)
    if n == 0 or parents[0] != -1 or any(not 0 <= parents[i] < i for i in range(1, n)):
        raise ValueError("a tree batch needs row 0 as its root and every parent before its "
                         "child")
    depth = [0] * n
    has_child = [False] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
        has_child[parents[i]] = True
    seqs: list[list[int]] = [[] for _ in range(n)]
    leaves = [i for i in range(n) if not has_child[i]]
    for seq, leaf in enumerate(leaves):
        node = leaf
        while node >= 0:
            seqs[node].append(seq)
            node = parents[node]
    return depth, seqs
