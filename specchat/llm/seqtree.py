"""Trees of candidates in one llama_decode, with llama.cpp sequence ids (engine/tree.py says
what a tree draft is and how it is accepted; engine.protocol.TreeModel is the contract).

Each leaf of the tree is a sequence of its own and each row belongs to the sequences of the
leaves below it, so a row attends to its ancestors and to the cached context, which is put
in every sequence first. The context is created with one unified cache (model.py), so that
copy touches cell metadata only, and a cell shared by several sequences is stored once.
After the step one branch is kept: every cell outside one sequence of the accepted path goes,
that sequence becomes sequence 0 again, and the branch is cut after the last accepted row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from specchat.errors import ModelError
from specchat.llm.batch import tree_layout
from specchat.llm.cbuf import log_reason
from specchat.llm.lib import LOG

# Sequences of one context: at most this many leaves per tree. Only contexts on a GPU get them
# by default: on a CPU a second branch never paid in the priced replays (docs/drafting.md),
# while a unified cache of 8 sequences made every plain step about 7% slower there
# (`specchat bench --categories writing,qa`: off vs llama-cpp-python 0.91x with 8, 0.98x
# with 1).
TREE_SEQUENCES = 8


@dataclass(frozen=True)
class _Pending:
    """A verified tree not yet cut back to one path."""

    start: int  # position of the root row
    tokens: list[int]
    seqs: list[list[int]]  # sequence ids of each row
    n_seqs: int


class TreeBatches:
    """Mixin of LlamaModel (model.py): eval_tree, keep_path, and dropping a pending tree."""

    path: Path
    _ctx: Any
    _mem: Any
    _batch: Any
    _tokens: list[int]
    _n_vocab: int
    _n_ctx: int
    _n_batch: int
    _sequences: int
    _token_in: np.ndarray
    _pos_in: np.ndarray
    _want_out: np.ndarray
    _tree: _Pending | None = None

    def _check_open(self) -> None:
        raise NotImplementedError

    def _fit(self, needed: int) -> None:
        raise NotImplementedError

    @property
    def max_branches(self) -> int:
        return self._sequences

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """One batch of a tree: row 0 appended after `tokens`, every other row one position
        after its parent row. Logits of every row; keep_path() then keeps one branch."""
        self._check_open()
        self._drop_tree()
        n, start = len(tokens), len(self._tokens)
        self._fit(start + n)
        if n > self._n_batch:
            raise ValueError(f"a tree of {n} rows does not fit one batch of {self._n_batch}")
        depth, seqs = tree_layout(parents)
        n_seqs = max(s for row in seqs for s in row) + 1
        if n_seqs > self.max_branches:
            raise ValueError(f"a tree with {n_seqs} leaves (at most {self.max_branches})")
        ids = np.asarray(tokens, dtype=np.int64)
        if ids.min() < 0 or ids.max() >= self._n_vocab:
            raise ValueError(f"token ids must be in [0, {self._n_vocab}) for {self.path.name}")
        for seq in range(1, n_seqs):
            llama_cpp.llama_memory_seq_cp(self._mem, 0, seq, -1, -1)
        self._tree = _Pending(start, [int(t) for t in tokens], seqs, n_seqs)
        out = np.empty((n, self._n_vocab), dtype=np.float32)
        try:
            self._decode_tree(ids, [start + d for d in depth], seqs, out)
        except BaseException:
            self._drop_tree(keep_root=False)
            raise
        self._tokens.append(int(tokens[0]))
        return out

    def _decode_tree(self, ids: np.ndarray, pos: list[int], seqs: list[list[int]],
                     out: np.ndarray) -> None:
        n, batch = len(ids), self._batch
        self._token_in[:n] = ids
        self._pos_in[:n] = pos
        self._want_out[:n] = 1
        for i, row in enumerate(seqs):
            batch.n_seq_id[i] = len(row)
            for j, seq in enumerate(row):
                batch.seq_id[i][j] = seq
        batch.n_tokens = n
        LOG.errors.clear()
        try:
            rc = llama_cpp.llama_decode(self._ctx, batch)
        finally:
            sequence_zero(batch, n)
        LOG.raise_pending_interrupt()
        if rc != 0:
            raise ModelError(f"llama_decode failed (code {rc}) on a tree of {n} rows: "
                             f"{log_reason(LOG.errors)}")
        for i in range(n):
            row = llama_cpp.llama_get_logits_ith(self._ctx, i)
            out[i] = np.ctypeslib.as_array(row, shape=(self._n_vocab,))

    def keep_path(self, rows: Sequence[int]) -> None:
        """Keep the rows of the accepted path (row 0 excluded) and drop the rest."""
        self._check_open()
        tree = self._tree
        if tree is None:
            raise ValueError("keep_path without a tree")
        winner = tree.seqs[rows[-1]][0] if rows else 0
        if tree.n_seqs > 1:
            llama_cpp.llama_memory_seq_keep(self._mem, winner)
            if winner != 0:
                llama_cpp.llama_memory_seq_cp(self._mem, winner, 0, -1, -1)
                llama_cpp.llama_memory_seq_rm(self._mem, winner, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._mem, 0, tree.start + 1 + len(rows), -1)
        self._tree = None
        self._tokens.extend(tree.tokens[r] for r in rows)

    def _drop_tree(self, keep_root: bool = True) -> None:
        """Back to exactly `tokens` in sequence 0 while a tree is pending (after an error,
        or when the engine truncates or evaluates without keeping a path)."""
        tree = self._tree
        if tree is None:
            return
        self._tree = None
        cut = tree.start + 1 if keep_root else tree.start
        llama_cpp.llama_memory_seq_rm(self._mem, -1, cut, -1)
        for seq in range(1, tree.n_seqs):
            llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)
        del self._tokens[cut:]


def sequences_for(n_batch: int, wanted: int = TREE_SEQUENCES) -> int:
    """Sequences a context with batches of n_batch rows gets (llama.cpp reserves an output
    row per sequence)."""
    return max(1, min(wanted, n_batch))


def sequence_zero(batch: Any, n: int) -> None:
    """Rows [0, n) of a batch belong to sequence 0 alone (the layout of every plain eval)."""
    for i in range(n):
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
