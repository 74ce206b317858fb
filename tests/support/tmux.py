"""Driving a real terminal under tmux in tests: keys in, the screen out."""

from __future__ import annotations

import subprocess
import time


def keys(session: str, *names: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *names], check=True)


def wait_for(session: str, text: str, timeout: float = 20.0) -> str:
    """The screen once `text` is on it; AssertionError (showing the screen) after timeout."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                check=False, capture_output=True, text=True).stdout
        if text in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared on the screen:\n{screen}")
