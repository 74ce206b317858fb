"""Driving a real terminal under tmux in tests: keys in, the screen out. Each Terminal is a
tmux server of its own (no user configuration, nothing shared between tests) whose clipboard
and window title also show whether an escape sequence was obeyed."""

from __future__ import annotations

import subprocess
import time


class Terminal:
    """A tmux server of its own (its own socket) with clipboard escapes turned on, so that an
    obeyed OSC 52 shows up as a paste buffer and an obeyed OSC 2 as the pane title."""

    def __init__(self, name: str) -> None:
        self.socket = name

    def tmux(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=check, env=env,
                              capture_output=True, text=True).stdout

    def start(self, command: str, env: dict[str, str], width: int = 160,
              height: int = 40) -> None:
        """A shell in a new server that starts with `env` (its panes inherit it), then
        `command` typed into it once clipboard escapes and renaming are on."""
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width),
                  "-y", str(height), "sh", env=env)
        self.tmux("set-option", "-g", "set-clipboard", "on")
        self.tmux("set-option", "-g", "allow-rename", "on")
        self.tmux("select-pane", "-t", "t", "-T", "untouched")
        self.keys(command, "Enter")

    def keys(self, *names: str) -> None:
        self.tmux("send-keys", "-t", "t", *names)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "t", check=False)

    def wait_for(self, text: str, timeout: float = 60.0, count: int = 1) -> str:
        """The screen once `text` is on it (`count` times); AssertionError after timeout."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if screen.count(text) >= count:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared on the screen:\n{screen}")

    def leave(self, marker: str) -> str:
        """Ctrl-D until `marker` shows the chat has left (a key sent while the prompt is
        being drawn can be missed)."""
        for _ in range(5):
            self.keys("C-d")
            try:
                return self.wait_for(marker, timeout=10)
            except AssertionError:
                continue
        return self.wait_for(marker, timeout=1)

    def clipboard(self) -> str:
        """What was written to the clipboard (tmux's paste buffers), '' when nothing."""
        return self.tmux("list-buffers", check=False)

    def title(self) -> str:
        return self.tmux("display-message", "-p", "-t", "t", "#{pane_title}").strip()

    def close(self) -> None:
        self.tmux("kill-server", check=False)
