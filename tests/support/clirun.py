"""Running the real CLI entry point in-process: exit code, stdout and stderr."""

from __future__ import annotations

import io
from collections.abc import Sequence

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
