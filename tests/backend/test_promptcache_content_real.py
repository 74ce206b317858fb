"""The prompt cache is keyed by what a model file holds, not by its path, size and mtime. A
model file replaced by another model of the same size, its mtime put back, must not get the
first model's saved states: its temperature-0 answer is its own.

The other model is SmolLM2-135M with its first two layers swapped (same size, same tensor
types, another model), written with the `gguf` package (the test extra).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.real
ROOT = Path(__file__).resolve().parents[2]


def swapped_layers_copy(src: Path, dst: Path) -> Path:
    """dst: `src` with the data of blk.0.* and blk.1.* swapped, byte for byte in place."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(src)
    spans = {t.name: (int(t.data_offset), int(t.n_bytes)) for t in reader.tensors}
    shutil.copyfile(src, dst)
    with dst.open("r+b") as out, src.open("rb") as original:
        for name, (offset, size) in spans.items():
            if not name.startswith("blk.0."):
                continue
            other = spans[name.replace("blk.0.", "blk.1.", 1)]
            assert other[1] == size, name
            for to, start in ((offset, other[0]), (other[0], offset)):
                original.seek(start)
                out.seek(to)
                out.write(original.read(size))
    return dst


def _ask(model: Path, home: Path, question: str, *extra: str) -> str:
    prompt = (ROOT / "specchat" / "engine" / "loop.py").read_text()[:3000] + "\n\n" + question
    done = subprocess.run([sys.executable, "-m", "specchat", "ask", "-m", str(model), "--spec",
                           "off", "-t", "0", "-n", "24", "--ctx", "2048", "--threads", "2",
                           *extra], input=prompt, env={**os.environ, "SPECCHAT_HOME": str(home),
                                                       "SPECCHAT_FIXED_THREADS": "1"},
                          cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_replaced_model_file_with_the_same_size_and_mtime_gets_no_saved_state(
        real_model_path: Callable[[str], Path], tmp_path: Path) -> None:
    original = real_model_path("smollm2-135m")
    other = swapped_layers_copy(original, tmp_path / "other.gguf")
    model = tmp_path / "model.gguf"
    shutil.copyfile(original, model)
    home = tmp_path / "home"
    _ask(model, home, "What does _prefill do?")  # saves the prompt's state
    assert list((home / "prompt-cache").glob("*.kv"))
    stat = model.stat()
    os.replace(other, model)  # another model, same name and size ...
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and the same mtime
    assert model.stat().st_size == stat.st_size
    own = _ask(model, tmp_path / "fresh-home", "Which events does it yield?",
               "--prompt-cache", "0")
    assert _ask(model, home, "Which events does it yield?") == own
