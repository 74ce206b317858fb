"""A prompt piped on stdin is read bounded like a named file: /dev/zero on stdin is one usage
error line (exit 2) after a few megabytes, never all the memory."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from specchat import fileio, fileread

ROOT = Path(__file__).resolve().parents[2]


def _bounded() -> None:
    """2 GiB of address space: a command that reads /dev/zero whole fails fast, not the box."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("command", ["ask", "chat"])
def test_dev_zero_on_stdin_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run([sys.executable, "-m", "specchat", command], env=env,
                              timeout=60, capture_output=True, text=True, stdin=zero,
                              preexec_fn=_bounded, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "stdin" in done.stderr
    assert "too large" in done.stderr and "pipe the part that matters" in done.stderr


def test_a_stream_is_read_whole_up_to_the_limit_and_refused_past_it() -> None:
    assert fileread.read_stream(io.BytesIO(b"x" * 10), 10, "stdin") == b"x" * 10
    with pytest.raises(fileio.FileIOError, match="stdin is too large"):
        fileread.read_stream(io.BytesIO(b"x" * 11), 10, "stdin")
