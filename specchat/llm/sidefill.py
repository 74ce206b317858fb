"""A long prefill of an exact target at a plain target's speed.

An exact target's cache holds V in bf16 (llm/exact.py), which keeps llama.cpp's CPU flash
attention off its tiled kernel for batches of 64 rows or more: a long prompt costs about 1.5x.
So a long prefill runs in a second, plain (f16/f16) context of the same weights, and its
finished cache moves into the exact context through llama_state_seq_get_data/set_data with
every V block rewritten f16 -> bf16 (same size; the type field and the bits change). Where the
exact cache already holds tokens, they go across first, V bf16 -> f16 (exact within f16's
range; a value beyond it keeps the prefill in the exact context), and on the way back their
cells keep the exact context's own bits. Single steps and verify rows still run in the exact
context, so a verify row equals a single step as before; the new tokens' keys and values are
rounded f32 -> f16 -> bf16 instead of f32 -> bf16, the same way in every mode.

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
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from specchat.errors import ModelError
from specchat.llm.context import new_context
from specchat.llm.exact import GGML_TYPE_BF16, GGML_TYPE_F16

# A prefill call of at least this many tokens goes through a plain context: at fewer the
# tiled kernel saves less than the second context and the copies of the cache cost.
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
    is not the layout this module knows; it is then untouched."""
    return _convert(state, GGML_TYPE_F16, GGML_TYPE_BF16, _to_bf16)


def f16_values(state: Buffer) -> bool:
    """The other way, bf16 V blocks into f16, in place, for an exact cache to go on filling
    in a plain context. False where the layout is another or a value is beyond f16's range;
    the blob may then be half rewritten and must be dropped."""
    return _convert(state, GGML_TYPE_BF16, GGML_TYPE_F16, _to_f16)


def keep_rows(state: Buffer, prefix: Buffer) -> bool:
    """Copies every layer's V rows of `prefix` (a bf16 state of the first cells) over the
    same cells of `state` (bf16, more cells), in place: the cells an exact context already
    held keep their own bits, not their round trip through f16 (which loses the smallest
    values' low bits). K went across unchanged (f16 in both). False where the two do not
    match; `state` is then untouched."""
    try:
        out, src = memoryview(state).cast("B"), memoryview(prefix).cast("B")
        ours, theirs = _v_blocks(out, GGML_TYPE_BF16), _v_blocks(src, GGML_TYPE_BF16)
    except (ValueError, TypeError, struct.error):
        return False
    if ours is None or theirs is None or ours[0] <= theirs[0] or \
            [row for _, _, row in ours[1]] != [row for _, _, row in theirs[1]]:
        return False
    cells = theirs[0]
    for (_, start, row), (_, src_start, _) in zip(ours[1], theirs[1], strict=True):
        out[start:start + cells * row] = src[src_start:src_start + cells * row]
    return True


# Where a V block's type field is, where its rows start, and its row size in bytes.
Block = tuple[int, int, int]


def _v_blocks(out: memoryview, v_type: int) -> tuple[int, list[Block]] | None:
    """The cell count and V blocks of a one-sequence state with f16 K and `v_type` V, read
    whole before anything may change; None for any other layout."""
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
    blocks = []
    for _ in range(layers):
        type_at = r.at
        if r.take("<i") != v_type:
            return None
        row = r.take("<Q")
        if row % 2:
            return None
        blocks.append((type_at, r.skip(cells * row), row))
    return (cells, blocks) if r.at == len(out) else None


def _convert(state: Buffer, source: int, target: int,
             convert: Callable[[np.ndarray], np.ndarray | None]) -> bool:
    try:
        out = memoryview(state).cast("B")
        found = _v_blocks(out, source)
    except (ValueError, TypeError, struct.error):
        return False
    if found is None:
        return False
    cells, blocks = found
    for type_at, start, row in blocks:
        block = np.frombuffer(out, dtype="<u2", count=cells * row // 2, offset=start)
        values = convert(block)
        if values is None:
            return False
        struct.pack_into("<i", out, type_at, target)
        block[:] = values
    return True


def _to_bf16(block: np.ndarray) -> np.ndarray:
    """f16 bits -> bf16 bits through f32, rounding to nearest even (every f16 is finite or
    inf/nan in f32; bf16 has f32's exponent range, so only the mantissa is rounded)."""
    values = block.view("<f2")
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(values)
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype("<u2")


def _to_f16(block: np.ndarray) -> np.ndarray | None:
    """bf16 bits -> f16 bits through f32, rounded to nearest even; None where a finite value
    would become infinite (beyond f16's 65504)."""
    wide = (block.astype(np.uint32) << 16).view(np.float32)
    with np.errstate(over="ignore"):
        narrow = wide.astype("<f2")
    if bool(np.any(np.isinf(narrow) & np.isfinite(wide))):
        return None
    return narrow.view("<u2")


class SideFills:
    """Mixin of LlamaModel (model.py): an exact target's long prefill in a plain context.

    While one fills, `_ctx` is the plain context and the exact one is parked, its cache as it
    was; `_settle_side` moves the cache across before anything else touches the model. A
    prefill after cached tokens (a later turn, a prompt-cache hit) first copies those into the
    plain context (V bf16 -> f16), and the cells they held keep their exact bits on the way
    back (`keep_rows`). A plain context is made per long prefill and freed at once: creating
    one costs milliseconds beside a prefill of seconds, and keeping it would double the
    cache's memory for good.
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
    _prefix: memoryview | None = None  # the exact context's state when the plain one started
    _held = 0  # how many tokens that state holds
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
        elif self.side_fill and self.exact and n >= SIDE_FILL_FROM:
            self._start_side()

    def _start_side(self) -> None:
        """Park the exact context behind a plain one that holds the same cells."""
        threads = int(llama_cpp.llama_n_threads(self._ctx))
        prefix = _state_of(self._ctx) if self._tokens else None
        if self._tokens and prefix is None:
            return
        try:
            side = new_context(self._model, self._n_ctx, self._n_batch, threads, True,
                               self._sequences)
        except ModelError:
            return  # no memory for a second cache: the exact context prefills itself
        if prefix is not None and not _copy_into(side, prefix, len(self._tokens)):
            llama_cpp.llama_free(side)  # cells out of order after a tree, say: not this time
            return
        self._prefix, self._held = prefix, len(self._tokens)
        self._parked, self._ctx = self._ctx, side
        self._mem = llama_cpp.llama_get_memory(side)

    def _settle_side(self) -> None:
        """Put the plain context's cache into the exact one and free the plain one; where the
        state cannot be moved, the exact context prefills the rest itself (never a wrong
        cache)."""
        if self._parked is None:
            return
        tokens, prefix, held = list(self._tokens), self._prefix, self._held
        state = _state_of(self._ctx) if len(tokens) > held else None
        moved = loading = False
        try:
            self._discard_side()
            del self._tokens[held:]  # what the exact context itself still holds
            if state is not None and bf16_values(state) and \
                    (prefix is None or keep_rows(state, prefix)):
                loading = True  # from here a failed load has emptied the exact cache
                if _load(self._ctx, state) and \
                        int(llama_cpp.llama_memory_seq_pos_max(self._mem, 0)) + 1 == len(tokens):
                    self._tokens[:] = tokens
                    moved = True
        finally:
            del state, prefix  # the copies of the cache outside llama.cpp: freed before a refill
            if not moved and (loading or len(self._tokens) != held):
                # a failed load, or Ctrl-C part way: an empty cache, never a wrong one
                self._discard_side()
                self._tokens.clear()
                llama_cpp.llama_memory_clear(self._mem, True)
        if moved:
            self.side_fills += 1
            return
        if len(self._tokens) == len(tokens):
            return  # the plain context had filled nothing
        self.side_fill = False
        self.eval(tokens[len(self._tokens):], [-1])

    def _discard_side(self) -> None:
        """Free the plain context and put the exact one back, its cache as it was."""
        self._prefix, self._held = None, 0
        if self._parked is not None:
            side, self._ctx, self._parked = self._ctx, self._parked, None
            self._mem = llama_cpp.llama_get_memory(self._ctx)
            llama_cpp.llama_free(side)


def _copy_into(ctx: Any, prefix: memoryview, cells: int) -> bool:
    """Load an exact context's state into an empty plain one, V bf16 -> f16, on a copy."""
    plain = bytearray(prefix)
    try:
        return f16_values(plain) and _load(ctx, memoryview(plain)) and int(
            llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(ctx), 0)) + 1 == cells
    finally:
        del plain


def _state_of(ctx: Any) -> memoryview | None:
    """Sequence 0's state in one buffer of exactly its length (None: llama.cpp wrote none)."""
    size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
    buf = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0))
    return memoryview(buf).cast("B")[:written] if written > 0 else None


def _load(ctx: Any, state: memoryview) -> bool:
    buf = (ctypes.c_uint8 * len(state)).from_buffer(state)
    return int(llama_cpp.llama_state_seq_set_data(ctx, buf, len(state), 0)) == len(state)
