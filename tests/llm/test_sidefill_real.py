"""An exact target's long prefill through a plain context (llm/sidefill.py) on a real model:
the moved cache gives the exact context's own next-token logits up to rounding, from an empty
cache as after cached tokens (which keep their own bits), a wrong rewrite would not, and a
state that cannot be moved falls back to the exact context's own prefill."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

backend = pytest.importorskip("specchat.llm.model")
sidefill = pytest.importorskip("specchat.llm.sidefill")
LlamaModel = backend.LlamaModel

pytestmark = pytest.mark.real

PROMPT = 700  # more than SIDE_FILL_FROM, and past the split-KV threshold of 512 cells
WARM = 200  # cached before a long prefill of the rest (fewer than SIDE_FILL_FROM: no move)


@pytest.fixture(scope="module")
def exact(real_model_path: Callable[[str], Path]) -> Iterator[LlamaModel]:
    with backend.load_model(real_model_path("smollm2-135m"), n_ctx=1024, n_threads=2,
                            n_gpu_layers=0, exact=True) as model:
        assert model.exact
        yield model


def prompt() -> list[int]:
    return np.random.default_rng(3).integers(100, 20000, PROMPT).tolist()


def next_logits(model: LlamaModel, side: bool) -> tuple[np.ndarray, bool]:
    """The engine's prefill (chunks of 512, logits thrown away), then the last token's step;
    and whether prefills may still move afterwards."""
    tokens = prompt()
    model.truncate(0)
    model.side_fill = side
    try:
        for lo in range(0, len(tokens) - 1, 512):
            model.eval(tokens[lo:min(lo + 512, len(tokens) - 1)], [-1])
        row = model.eval(tokens[-1:], [0])[0].copy()
        assert model.cached_positions() == len(tokens) == len(model.tokens)
        return row, model.side_fill
    finally:
        model.side_fill = True
        model.truncate(0)


def close(got: np.ndarray, own: np.ndarray) -> bool:
    """Within rounding: the largest logit difference under 5% of the largest logit (measured:
    0.42 of 27); NaN, what a wrong V gives, is never close."""
    return bool(np.abs(got - own).max() < 0.05 * np.abs(own).max())


def test_a_moved_prefill_gives_the_exact_contexts_own_logits_up_to_rounding(
        exact: LlamaModel) -> None:
    moved = exact.side_fills
    own, _ = next_logits(exact, side=False)
    assert exact.side_fills == moved
    got, _ = next_logits(exact, side=True)
    assert exact.side_fills == moved + 1
    assert got.argmax() == own.argmax() and close(got, own)


def test_negative_control_v_bits_moved_unconverted_give_other_logits(
        exact: LlamaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    own, _ = next_logits(exact, side=False)
    monkeypatch.setattr(sidefill, "_to_bf16", lambda values: values.view("<u2"))
    moved = exact.side_fills
    wrong, _ = next_logits(exact, side=True)
    assert exact.side_fills == moved + 1
    assert not close(wrong, own)


@pytest.mark.parametrize("breaks", ["layout", "magic"])
def test_a_state_that_cannot_move_falls_back_to_the_exact_contexts_own_prefill(
        exact: LlamaModel, monkeypatch: pytest.MonkeyPatch, breaks: str) -> None:
    own, _ = next_logits(exact, side=False)
    real = sidefill.bf16_values
    if breaks == "layout":  # one this module does not know: refused before loading
        monkeypatch.setattr(sidefill, "bf16_values", lambda buf: real(buf[:-2]))
    else:  # one llama.cpp itself refuses
        def bad_magic(buf: memoryview) -> bool:
            buf[:4] = b"\0\0\0\0"
            return bool(real(buf))
        monkeypatch.setattr(sidefill, "bf16_values", bad_magic)
    moved = exact.side_fills
    got, still_moving = next_logits(exact, side=True)
    assert exact.side_fills == moved and not still_moving
    assert np.array_equal(got, own)


def warm_logits(model: LlamaModel, side: bool) -> tuple[np.ndarray, bytes, bytes]:
    """The prompt's first WARM tokens filled in the exact context itself, then the rest in one
    long prefill and the last token's step; and sequence 0's state before and after."""
    tokens = prompt() + prompt()[:WARM]
    model.truncate(0)
    model.side_fill = side
    try:
        model.eval(tokens[:WARM], [-1])
        before = model.save_state()
        model.eval(tokens[WARM:-1], [-1])
        row = model.eval(tokens[-1:], [0])[0].copy()
        assert model.cached_positions() == len(tokens) == len(model.tokens)
        return row, before, model.save_state()
    finally:
        model.side_fill = True
        model.truncate(0)


def v_rows(blob: bytes, cells: int) -> list[bytes]:
    """Every layer's V bytes of the first `cells` cells of a state with bf16 V."""
    found = sidefill._v_blocks(memoryview(blob), sidefill.GGML_TYPE_BF16)
    assert found is not None
    return [blob[start:start + cells * row] for _, start, row in found[1]]


def test_a_prefill_after_cached_tokens_moves_and_the_cached_cells_keep_their_bits(
        exact: LlamaModel) -> None:
    own, _, _ = warm_logits(exact, side=False)
    moved = exact.side_fills
    got, before, after = warm_logits(exact, side=True)
    assert exact.side_fills == moved + 1
    assert got.argmax() == own.argmax() and close(got, own)
    assert v_rows(after, WARM) == v_rows(before, WARM)


def test_negative_control_cached_cells_moved_unconverted_give_other_logits(
        exact: LlamaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    own, _, _ = warm_logits(exact, side=False)
    monkeypatch.setattr(sidefill, "_to_f16", lambda block: block)  # bf16 bits read as f16
    moved = exact.side_fills
    wrong, _, _ = warm_logits(exact, side=True)
    assert exact.side_fills == moved + 1
    assert not close(wrong, own)


def test_cached_tokens_that_cannot_move_leave_the_exact_context_to_prefill_this_once(
        exact: LlamaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    own, _, _ = warm_logits(exact, side=False)
    monkeypatch.setattr(sidefill, "f16_values", lambda buf: False)
    moved = exact.side_fills
    got, _, _ = warm_logits(exact, side=True)
    assert exact.side_fills == moved and exact.side_fill
    assert np.array_equal(got, own)


def test_ctrl_c_while_moving_back_leaves_a_cache_that_says_what_it_holds(
        exact: LlamaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = prompt() + prompt()[:WARM]
    exact.truncate(0)
    exact.eval(tokens[:WARM], [-1])
    exact.eval(tokens[WARM:-1], [-1])  # parked behind the plain context
    real = type(exact)._discard_side

    def interrupted(model: LlamaModel) -> None:
        real(model)
        monkeypatch.setattr(type(exact), "_discard_side", real)
        raise KeyboardInterrupt  # after the plain context is freed, before anything else

    monkeypatch.setattr(type(exact), "_discard_side", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            exact.eval(tokens[-1:], [0])
        assert exact.cached_positions() == len(exact.tokens)
        row = exact.eval(tokens[len(exact.tokens):], [-1])[0]  # and it goes on from there
        assert np.isfinite(row).all() and len(exact.tokens) == len(tokens)
    finally:
        exact.truncate(0)
