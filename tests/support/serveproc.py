"""A `specchat serve` process for tests: a free port, waiting for /health, stopping it."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(proc: subprocess.Popen[str] | subprocess.Popen[bytes], url: str, log: Path,
               seconds: float = 600, *, path: str = "/health",
               name: str = "specchat serve") -> None:
    """Until `path` says 200 (loading takes seconds; a busy machine can take minutes);
    the test fails with the server's log if it exits or never gets there."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited {proc.returncode}:\n{_text(log)}")
        try:
            if httpx.get(url + path, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"{name} never became ready:\n{_text(log)}")


def stop(proc: subprocess.Popen[str] | subprocess.Popen[bytes],
         sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def _text(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")
