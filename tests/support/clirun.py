"""Running the real CLI: in-process through its entry point (exit code, stdout, stderr), or as
its own `python -m specchat` process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from specchat import cli


class FakeStdin:
    """What sys.stdin looks like when something is piped in (or a terminal, with tty=True)."""

    def __init__(self, data: bytes, tty: bool = False) -> None:
        self.buffer = io.BytesIO(data)
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty

    def read(self) -> str:
        return self.buffer.read().decode()


def run_cli(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        cli.main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_cli_process(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m specchat ARGS` as its own process, this checkout first on its path, no
    stdin."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=timeout,
                          check=False)
