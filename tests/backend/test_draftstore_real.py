"""The drafting store's files as a real `specchat ask` meets them: what it cannot read is
skipped with one note, never a failed answer or a hang, and stays where it is."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.backend.draftstore import SUFFIX

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]


def test_ask_answers_past_a_garbage_segment_and_a_fifo(
        tmp_path: Path, real_model_path: Callable[[str], Path]) -> None:
    model = real_model_path("smollm2-135m")
    drafts = tmp_path / "drafts"
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"),
           "SPECCHAT_CACHE": str(model.parent), "SPECCHAT_DRAFT_STORE_DIR": str(drafts),
           "PYTHONPATH": str(ROOT)}

    def ask(spec: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specchat", "ask", "-m", str(model),
                               "--spec", spec, "-n", "6", "--temperature", "0", "Say hi"],
                              env=env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, check=False)

    first = ask("off")  # makes this vocabulary's store folder
    assert first.returncode == 0, first.stderr
    (folder,) = [d for d in drafts.iterdir() if d.is_dir()]
    garbage = folder / f"0{SUFFIX}"
    garbage.write_bytes(b"SPCHDRF1\x04\x00\x00\x00null")
    os.mkfifo(folder / f"x{SUFFIX}")
    done = ask("auto")  # reads the store to draft from, then writes and tidies it
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == first.stdout.strip()
    notes = [line for line in done.stderr.splitlines() if "drafting store" in line]
    assert len(notes) == 1 and "skipped 2 files" in notes[0], done.stderr
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr
    assert garbage.exists() and (folder / f"x{SUFFIX}").exists()
    assert len(list(folder.glob(f"*{SUFFIX}"))) >= 3  # both answers kept beside them
