"""A long prefill of an exact target at a plain target's speed.

An exact target's cache holds V in bf16 (llm/exact.py), which keeps llama.cpp's CPU flash
attention off its tiled kernel for batches of 64 rows or more: a long prompt costs about 1.5x.
So a long prefill into an empty exact cache runs in a second, plain (f16/f16) context of the
same weights, and its finished cache moves into the exact context through
llama_state_seq_get_data/set_data with every V block rewritten f16 -> bf16 (same size; the
type field and the bits change). Single steps and verify rows still run in the exact context,
so a verify row equals a single step as before; the prompt's own keys and values are rounded
f32 -> f16 -> bf16 instead of f32 -> bf16, the same way in every mode.

The serialized layout is the one of llama.cpp's llama_kv_cache::state_write in the vendored
release (src/llama-kv-cache.cpp): magic u32, seq_id i32, n_stream u32, per stream cell_count
u32, per cell pos i32 + n_seq_id u32 + seq ids i32, then v_trans u32, n_layer u32, per layer
K (type i32, row size u64, cell_count rows), then per layer V likewise when not transposed.
Anything else (transposed V, extra per-cell fields, several streams, a second cache, a size
that does not add up) makes `bf16_values` return None and the caller prefills the exact context
itself: never a wrong cache.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from specchat.errors import ModelError
from specchat.llm.context import new_context
from specchat.llm.exact import GGML_TYPE_BF16, GGML_TYPE_F16

# A prefill of at least this many tokens into an empty exact cache goes through a plain
# context: at fewer the tiled kernel saves less than the second context costs.
SIDE_FILL_FROM = 512
# The shortest batch that keeps filling the plain context once started (the tiled kernel's
# threshold in ggml-cpu/ops.cpp); a shorter call moves the cache into the exact context first.
SIDE_ROWS = 64

# What a state can be rewritten in: a bytearray in tests, llama.cpp's own buffer in use.
Buffer = bytearray | memoryview | ctypes.Array[Any]


class _Reader:
    """Bounds-checked little-endian reads over a state blob."""

    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ValueError("state ends early")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return int(value)

    def skip(self, n: int) -> int:
        start = self.at
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("state ends early")
        self.at += n
        return start


def bf16_values(state: Buffer) -> bool:
    """Turns the f16 V blocks of one sequence's state into bf16 (rounded to nearest even),
    in place: a cache's state can be gigabytes, so it is never copied. False where the blob
    is not the layout this module knows; it may then be half rewritten and must be dropped."""
    try:
        return _rewrite(memoryview(state).cast("B"))
    except (ValueError, TypeError, struct.error):
        return False


def _rewrite(out: memoryview) -> bool:
    r = _Reader(out)
    r.take("<I")  # magic
    if r.take("<i") != 0 or r.take("<I") != 1:  # sequence 0, one stream (a unified cache)
        return False
    cells = r.take("<I")
    if cells == 0:
        return False
    for i in range(cells):
        if r.take("<i") != i or r.take("<I") != 1 or r.take("<i") != 0:
            return False  # positions 0.. in order, each in sequence 0 only (no extra fields)
    v_trans, layers = r.take("<I"), r.take("<I")
    if v_trans != 0 or layers == 0:
        return False
    for _ in range(layers):  # K blocks stay as they are
        if r.take("<i") != GGML_TYPE_F16:
            return False
        r.skip(cells * r.take("<Q"))
    blocks = []
    for _ in range(layers):  # checked whole before any byte is changed
        type_at = r.at
        if r.take("<i") != GGML_TYPE_F16:
            return False
        row = r.take("<Q")
        if row % 2:
            return False
        blocks.append((type_at, r.skip(cells * row), cells * row // 2))
    if r.at != len(out):
        return False
    for type_at, start, count in blocks:
        struct.pack_into("<i", out, type_at, GGML_TYPE_BF16)
        block = np.frombuffer(out, dtype="<u2", count=count, offset=start)
        block[:] = _to_bf16(block.view("<f2"))
    return True


def _to_bf16(values: np.ndarray) -> np.ndarray:
    """f16 -> bf16 bits through f32, rounding to nearest even (every f16 is finite or inf/nan
    in f32; bf16 has f32's exponent range, so only the mantissa is rounded)."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(values)
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype("<u2")


class SideFills:
    """Mixin of LlamaModel (model.py): an exact target's long prefill in a plain context.

    While one fills, `_ctx` is the plain context and the exact one is parked; `_settle_side`
    moves the cache across before anything else touches the model. A plain context is made
    per long prefill and freed at once: creating one costs milliseconds beside a prefill of
    seconds, and keeping it would double the cache's memory for good.
    """

    exact: bool
    _model: Any
    _ctx: Any
    _mem: Any
    _tokens: list[int]
    _n_ctx: int
    _n_batch: int
    _sequences: int
    _parked: Any = None  # the exact context while the plain one fills
    side_fill = True  # off for good once a state did not have the known layout (or by hand)
    side_fills = 0  # prefills moved into the exact context (for tests and benchmarks)

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        raise NotImplementedError

    def _side_before_eval(self, n: int) -> None:
        """Start or keep filling the plain context for a prefill of `n` tokens, or settle
        before any other batch."""
        if self._parked is not None:
            if n < SIDE_ROWS:
                self._settle_side()
        elif self.side_fill and self.exact and not self._tokens and n >= SIDE_FILL_FROM:
            threads = int(llama_cpp.llama_n_threads(self._ctx))
            try:
                side = new_context(self._model, self._n_ctx, self._n_batch, threads, True,
                                   self._sequences)
            except ModelError:
                return  # no memory for a second cache: the exact context prefills itself
            self._parked, self._ctx = self._ctx, side
            self._mem = llama_cpp.llama_get_memory(side)

    def _settle_side(self) -> None:
        """Put the plain context's cache into the exact one and free the plain one; where the
        state cannot be moved, prefill the exact context itself (never a wrong cache)."""
        if self._parked is None:
            return
        tokens = list(self._tokens)
        state = _state_of(self._ctx) if tokens else None
        try:
            self._discard_side()
            self._tokens.clear()
            if state is not None and bf16_values(state) and _load(self._ctx, state) and \
                    int(llama_cpp.llama_memory_seq_pos_max(self._mem, 0)) + 1 == len(tokens):
                self._tokens.extend(tokens)
                self.side_fills += 1
                return
        finally:
            del state  # the only copy of the cache outside llama.cpp: freed before a refill
            if len(self._tokens) != len(tokens):  # not moved, or Ctrl-C in between: empty
                self._tokens.clear()
                llama_cpp.llama_memory_clear(self._mem, True)
        if tokens:
            self.side_fill = False
            self.eval(tokens, [-1])

    def _discard_side(self) -> None:
        """Free the plain context and put the exact one back, its cache as it was."""
        if self._parked is not None:
            side, self._ctx, self._parked = self._ctx, self._parked, None
            self._mem = llama_cpp.llama_get_memory(self._ctx)
            llama_cpp.llama_free(side)


def _state_of(ctx: Any) -> memoryview | None:
    """Sequence 0's state in one buffer of exactly its length (None: llama.cpp wrote none)."""
    size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
    buf = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0))
    return memoryview(buf).cast("B")[:written] if written > 0 else None


def _load(ctx: Any, state: memoryview) -> bool:
    buf = (ctypes.c_uint8 * len(state)).from_buffer(state)
    return int(llama_cpp.llama_state_seq_set_data(ctx, buf, len(state), 0)) == len(state)
