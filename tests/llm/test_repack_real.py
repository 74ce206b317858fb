"""Weights repacked at load (llama.cpp's default) or kept as the file has them (--no-repack),
on real GGUF files: the choice reaches llama.cpp, other kernels run (other floats), a saved
state is not taken across, the CLI's flag gets there, and an exact target stays exact
without repacking."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.support.realengine import random_context, single_and_batch

backend = pytest.importorskip("specchat.llm.model")

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
THREADS = 2  # flash attention's split path needs two threads (tests/llm/test_exact_real.py)


def _load_log(path: Path, repack: bool) -> tuple[str, np.ndarray, str]:
    """llama.cpp's log of the load, the logits of one short prompt, and the state key."""
    log = io.StringIO()
    with contextlib.redirect_stderr(log), \
            backend.load_model(path, n_ctx=256, n_gpu_layers=0, n_threads=THREADS,
                               verbose=True, repack=repack) as model:
        logits = model.eval(list(range(100, 140)), [-1])
        return log.getvalue(), logits, model.state_key


@pytest.fixture(scope="module")
def gemma(real_model_path: Callable[[str], Path]) -> Path:
    """Gemma 270M (Q4_K weights, which llama.cpp repacks for the CPU), once it is known that
    this CPU has repacked kernels at all."""
    path = real_model_path("gemma3-270m")
    if "CPU_REPACK" not in _load_log(path, True)[0]:
        pytest.skip("llama.cpp has no repacked kernels for this CPU: nothing to turn off")
    return path


def test_no_repack_keeps_the_files_weights_and_runs_other_kernels(gemma: Path) -> None:
    repacked_log, repacked, repacked_key = _load_log(gemma, True)
    assert "CPU_REPACK" in repacked_log
    plain_log, plain, plain_key = _load_log(gemma, False)
    assert "CPU_REPACK" not in plain_log
    # The same model either way, but other kernels: other floats, so a state saved under
    # one (its KV cache) is not restored under the other.
    assert not np.array_equal(repacked, plain)
    assert np.corrcoef(repacked.ravel(), plain.ravel())[0, 1] > 0.99
    assert repacked_key != plain_key


def test_an_exact_target_without_repacking_verifies_rows_as_single_steps(
        real_model_path: Callable[[str], Path]) -> None:
    with backend.load_model(real_model_path("qwen2.5-coder-0.5b"), n_ctx=2048,
                            n_threads=THREADS, n_gpu_layers=0, exact=True,
                            repack=False) as model:
        assert model.exact_rows is not None and not model.repacked
        prompt, tokens = random_context(0)
        for size in range(2, model.exact_rows + 1):
            single, batch = single_and_batch(model, prompt, tokens[:size])
            assert np.array_equal(single, batch), f"a batch of {size} is not single steps"


@pytest.mark.parametrize(("flag", "repacked"), [("--repack", True), ("--no-repack", False)])
def test_the_cli_flag_reaches_the_load(flag: str, repacked: bool, tmp_path: Path,
                                       gemma: Path) -> None:
    """`specchat ask --no-repack` in a real process: llama.cpp's own log of the load shows no
    repacked buffer (and with --repack, one)."""
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "ask", "-m", str(gemma), "--spec", "off", "-v",
         flag, "-n", "2", "Hi"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"),
             "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-500:]
    assert ("CPU_REPACK" in done.stderr) is repacked
