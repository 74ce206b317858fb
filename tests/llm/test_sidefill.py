"""Rewriting a serialized KV cache's V blocks from f16 to bf16 (llm/sidefill.py): the layout
is checked field by field before any byte changes, and anything else is refused."""

from __future__ import annotations

import struct

import numpy as np
import pytest

sidefill = pytest.importorskip("specchat.llm.sidefill")

F16, BF16 = 1, 30


def state(cells: int = 3, layers: int = 2, row: int = 8, v_type: int = F16,
          v_trans: int = 0, values: np.ndarray | None = None) -> bytes:
    """A state blob as llama_state_seq_get_data writes one for sequence 0."""
    out = struct.pack("<IiII", 0xDEADBEEF, 0, 1, cells)
    out += b"".join(struct.pack("<iIi", i, 1, 0) for i in range(cells))
    out += struct.pack("<II", v_trans, layers)
    k = np.arange(cells * row // 2, dtype="<f2").tobytes()
    v = (values if values is not None else np.linspace(-3, 3, cells * row // 2)).astype("<f2")
    for _ in range(layers):
        out += struct.pack("<iQ", F16, row) + k
    for _ in range(layers):
        out += struct.pack("<iQ", v_type, row) + v.tobytes()
    return out


def test_v_blocks_become_bf16_and_everything_else_stays() -> None:
    blob = state()
    out = bytearray(blob)
    assert sidefill.bf16_values(out) and len(out) == len(blob)
    head = 16 + 3 * 12 + 8 + 2 * (12 + 3 * 8)
    assert out[:head] == blob[:head]  # cells and K blocks untouched
    v_at = head + 12
    assert struct.unpack_from("<iQ", out, head) == (BF16, 8)
    got = np.frombuffer(out, "<u2", 12, v_at).astype(np.uint32) << 16
    want = np.linspace(-3, 3, 12).astype("<f2").astype(np.float32)
    assert np.allclose(got.view(np.float32), want, rtol=2 ** -8)


def test_f16_to_bf16_rounds_to_nearest_even() -> None:
    # bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and goes to the
    # even one (1); 1 + 3 * 2^-8, halfway between 1 + 2^-7 and 1 + 2^-6, goes up.
    values = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, np.inf], dtype="<f2")
    bits = sidefill._to_bf16(values).astype(np.uint32) << 16
    assert bits.view(np.float32).tolist() == [1.0, 1.0, 1 + 2 ** -6, -2.5, np.inf]
    assert np.isnan((sidefill._to_bf16(np.array([np.nan], "<f2")).astype(np.uint32)
                     << 16).view(np.float32)[0])


@pytest.mark.parametrize("blob", [
    state()[:-1],  # ends early
    state() + b"\0",  # a second cache after this one (sliding-window models)
    state(v_type=BF16),  # already not f16
    state(v_trans=1),  # V transposed (flash attention off)
    struct.pack("<IiII", 0xDEADBEEF, 0, 2, 0),  # two streams
    state(cells=0),
    b"",
])
def test_a_state_of_another_layout_is_refused_untouched(blob: bytes) -> None:
    out = bytearray(blob)
    assert not sidefill.bf16_values(out)
    assert out == blob


def test_cells_out_of_order_or_shared_are_refused() -> None:
    blob = bytearray(state())
    struct.pack_into("<i", blob, 16 + 12, 5)  # the second cell claims position 5
    assert not sidefill.bf16_values(blob)
    blob = bytearray(state())
    struct.pack_into("<I", blob, 16 + 4, 2)  # the first cell in two sequences
    assert not sidefill.bf16_values(blob)


def bf16_state(cells: int, values: np.ndarray, layers: int = 2, row: int = 8) -> bytearray:
    """A state whose V blocks hold `values` (cells * row / 2 of them) in bf16."""
    out = bytearray(state(cells, layers, row, values=np.zeros(cells * row // 2)))
    assert sidefill.bf16_values(out)
    found = sidefill._v_blocks(memoryview(out), BF16)
    assert found is not None
    bits = (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    for _, start, _ in found[1]:
        out[start:start + len(bits)] = bits
    return out


def v_floats(blob: bytearray, v_type: int) -> np.ndarray:
    found = sidefill._v_blocks(memoryview(blob), v_type)
    assert found is not None
    cells, blocks = found
    _, start, row = blocks[0]
    raw = np.frombuffer(blob, "<u2", cells * row // 2, start)
    return raw.view("<f2").astype(np.float32) if v_type == F16 else \
        (raw.astype(np.uint32) << 16).view(np.float32)


def test_bf16_values_within_f16s_range_go_to_f16_and_back_unchanged() -> None:
    values = np.array([1.0, -2.5, 0.0078125, 300.0, -65280.0, 0.5, 3.0, 1.5, 2.0, -1.0, 4.0,
                       0.25], np.float32)
    blob = bf16_state(3, values)
    assert sidefill.f16_values(blob)
    assert v_floats(blob, F16).tolist() == values.tolist()
    assert sidefill.bf16_values(blob)
    assert v_floats(blob, BF16).tolist() == values.tolist()


def test_a_value_beyond_f16s_range_refuses_the_move_to_f16() -> None:
    values = np.full(12, 1.0, np.float32)
    values[5] = 1e6  # a bf16 value f16 can only hold as infinity
    assert not sidefill.f16_values(bf16_state(3, values))
    values[5] = np.inf  # an infinity stays one: nothing is lost
    assert sidefill.f16_values(bf16_state(3, values))


def test_keep_rows_puts_back_the_earlier_cells_own_bits_and_nothing_else() -> None:
    tiny = np.float32(2 ** -20 * (1 + 2 ** -7))  # an f16 subnormal loses its low bits
    prefix = bf16_state(2, np.full(8, tiny))
    longer_values = np.concatenate([np.full(8, tiny), np.arange(4, dtype=np.float32)])
    longer = bf16_state(3, longer_values)
    assert sidefill.f16_values(longer) and sidefill.bf16_values(longer)
    assert v_floats(longer, BF16)[0] != tiny  # the round trip through f16 changed it
    assert sidefill.keep_rows(longer, prefix)
    assert v_floats(longer, BF16).tolist() == longer_values.tolist()


@pytest.mark.parametrize("prefix", [
    bf16_state(3, np.zeros(12)),  # as many cells: nothing new to keep them beside
    bf16_state(2, np.zeros(4), row=4),  # another row size
    bytearray(state(2)),  # V still f16
])
def test_keep_rows_refuses_a_prefix_that_does_not_match_untouched(prefix: bytearray) -> None:
    longer = bf16_state(3, np.ones(12))
    before = bytes(longer)
    assert not sidefill.keep_rows(longer, prefix)
    assert longer == before
