"""An exact target's long prefill through a plain context (llm/sidefill.py) on a real model:
the moved cache gives the exact context's own next-token logits up to rounding, a wrong
rewrite would not, and a state that cannot be moved falls back to the exact context's own
prefill."""

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
