"""Fixtures of the engine's tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from specchat.engine import drafters, loop
from specchat.engine.options import SamplingOptions
from specchat.engine.sampling import probs


@pytest.fixture
def memoized_warps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure warp function (`probs`) memoized in the loop and the drafters, so that tens of
    thousands of seeded draws fit in seconds: same logits, window and options give the same
    array (read-only: the engine must never modify a row it was given), only time changes.
    A module asks for it with `pytestmark = pytest.mark.usefixtures("memoized_warps")`."""
    memo: dict[tuple[Any, ...], np.ndarray] = {}

    def cached(logits: np.ndarray, recent: Sequence[int], opts: SamplingOptions) -> np.ndarray:
        key = (logits.tobytes(), tuple(recent), opts.temperature, opts.top_k, opts.top_p,
               opts.min_p, opts.repeat_penalty)
        out = memo.get(key)
        if out is None:
            out = probs(logits, recent, opts)
            out.setflags(write=False)  # the engine must never modify a row it was given
            memo[key] = out
        return out

    monkeypatch.setattr(loop, "probs", cached)
    monkeypatch.setattr(drafters, "probs", cached)
