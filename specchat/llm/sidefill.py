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


class _Reader:
    """Bounds-checked little-endian reads over a state blob."""

    def __init__(self, data: bytes | bytearray) -> None:
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


def bf16_values(state: bytes) -> bytes | None:
    """The state of one sequence with its f16 V blocks turned bf16 (rounded to nearest even),
    or None where the blob is not the layout this module knows."""
    try:
        return _rewrite(state)
    except (ValueError, struct.error):
        return None


def _rewrite(state: bytes) -> bytes | None:
    out = bytearray(state)
    r = _Reader(out)
    r.take("<I")  # magic
    if r.take("<i") != 0 or r.take("<I") != 1:  # sequence 0, one stream (a unified cache)
        return None
    cells = r.take("<I")
    if cells == 0:
        return None
    for i in range(cells):
        if r.take("<i") != i or r.take("<I") != 1 or r.take("<i") != 0:
            return None  # positions 0.. in order, each in sequence 0 only (no extra fields)
    v_trans, layers = r.take("<I"), r.take("<I")
    if v_trans != 0 or layers == 0:
        return None
    for _ in range(layers):  # K blocks stay as they are
        if r.take("<i") != GGML_TYPE_F16:
            return None
        r.skip(cells * r.take("<Q"))
    for _ in range(layers):
        type_at = r.at
        if r.take("<i") != GGML_TYPE_F16:
            return None
        row = r.take("<Q")
        if row % 2:
            return None
        start = r.skip(cells * row)
        struct.pack_into("<i", out, type_at, GGML_TYPE_BF16)
        block = np.frombuffer(out, dtype="<f2", count=cells * row // 2, offset=start)
        out[start:start + cells * row] = _to_bf16(block).tobytes()
    return bytes(out) if r.at == len(out) else None


def _to_bf16(values: np.ndarray) -> np.ndarray:
    """f16 -> bf16 bits through f32, rounding to nearest even (every f16 is finite or inf/nan
    in f32; bf16 has f32's exponent range, so only the mantissa is rounded)."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(values)
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype("<u2")


class SideFill:
    """The plain context an exact LlamaModel fills while a long prefill lasts.

    While one is active the model's `_ctx` is the plain context and the exact one is parked
    here; `settle` moves the cache across before anything else touches the model. A context
    is made per long prefill and freed at once: creating one costs milliseconds beside a
    prefill of seconds, and keeping it would double the cache's memory for good.
    """

    def __init__(self) -> None:
        self._parked: Any = None  # the exact context while the plain one fills
        self.enabled = True  # off for good once a state did not have the known layout
        self.moved = 0  # prefills moved into the exact context (for tests and benchmarks)

    def before_eval(self, m: Any, n: int) -> None:
        """Called by eval() with its batch length: start or keep filling the plain context
        for a prefill, or settle before any other batch."""
        if self._parked is not None:
            if n < SIDE_ROWS:
                self.settle(m)
        elif self.enabled and m.exact and not m._tokens and n >= SIDE_FILL_FROM:
            self._start(m)

    def _start(self, m: Any) -> None:
        threads = int(llama_cpp.llama_n_threads(m._ctx))
        try:
            side = new_context(m._model, m._n_ctx, m._n_batch, threads, True, m._sequences)
        except ModelError:
            return  # no memory for a second cache: the exact context prefills itself
        self._parked, m._ctx = m._ctx, side
        m._mem = llama_cpp.llama_get_memory(side)

    def settle(self, m: Any) -> None:
        """Put the plain context's cache into the exact one and free the plain one; where the
        state cannot be moved, prefill the exact context itself (never a wrong cache)."""
        if self._parked is None:
            return
        side, tokens = m._ctx, list(m._tokens)
        state = bf16_values(_state_of(side)) if tokens else None
        try:
            self.discard(m)
            m._tokens.clear()
            if state is not None and _load(m._ctx, state) and \
                    int(llama_cpp.llama_memory_seq_pos_max(m._mem, 0)) + 1 == len(tokens):
                m._tokens.extend(tokens)
                self.moved += 1
                return
        finally:
            if len(m._tokens) != len(tokens):  # not moved, or Ctrl-C in between: empty
                m._tokens.clear()
                llama_cpp.llama_memory_clear(m._mem, True)
        if tokens:
            self.enabled = False
            m.eval(tokens, [-1])

    def discard(self, m: Any) -> None:
        """Free the plain context and put the exact one back, its cache as it was."""
        if self._parked is not None:
            llama_cpp.llama_free(m._ctx)
            m._ctx, self._parked = self._parked, None
            m._mem = llama_cpp.llama_get_memory(m._ctx)


def _state_of(ctx: Any) -> bytes:
    size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
    buf = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0))
    return ctypes.string_at(buf, written) if written > 0 else b""


def _load(ctx: Any, state: bytes) -> bool:
    buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    return int(llama_cpp.llama_state_seq_set_data(ctx, buf, len(state), 0)) == len(state)
