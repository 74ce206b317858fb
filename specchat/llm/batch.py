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
