"""`specchat serve` as a command: refusals before anything loads, and a model that fails to
load ending the server with one line and exit 1 (no models needed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.clirun import FakeStdin, run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))


def test_parallel_above_one_is_refused_saying_why(capsys: Any) -> None:
    code, out, err = run_cli(["serve", "--parallel", "2"], capsys)
    assert code == 2 and out == ""
    assert "one request at a time" in err and "--queue" in err


def test_port_in_use_is_a_usage_error(capsys: Any) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, _, err = run_cli(["serve", "--port", str(port)], capsys)
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err


def test_bad_generation_default_fails_before_listening(capsys: Any) -> None:
    code, _, err = run_cli(["serve", "--top-p", "0"], capsys)
    assert code == 2 and "top_p" in err


def test_a_model_that_cannot_load_ends_the_server(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    missing = tmp_path / "nothing-here.gguf"
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "serve", "-m", str(missing), "--port", str(port),
         "--spec", "off"], cwd=ROOT, env={**os.environ, "SPECCHAT_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "specchat: error:" in done.stderr and "nothing-here.gguf" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("flags, strict", [([], False), (["--strict-model"], True)])
def test_strict_model_reaches_the_server(capsys: Any, monkeypatch: pytest.MonkeyPatch,
                                         flags: list[str], strict: bool) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("specchat.serve.server.run",
                        lambda load, config, **kwargs: seen.append(config) or 0)
    code, _, err = run_cli(["serve", *flags], capsys)
    assert code == 0, err
    assert seen[0].strict_model is strict and seen[0].accepts("gpt-4o") is not strict
