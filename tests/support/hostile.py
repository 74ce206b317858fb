"""Hostile bytes for the terminal tests: a model that answers a scripted text (escape
sequences included), a local OpenAI-compatible endpoint that does the same, and an isolated
tmux server whose clipboard and window title show whether a terminal obeyed them."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from specchat.backend.base import Message
from specchat.backend.local import Runtime
from tests.support.fake_runtime import fake_runtime
from tests.support.fakeendpoint import FakeEndpoint, serve
from tests.support.fakes import FakeModel

# Writes "pwned" to the clipboard (OSC 52), renames the window (OSC 2), clears the screen.
CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"
TITLE = "\x1b]2;pwned-title\x07"
CLEAR = "\x1b[2J\x1b[H"
HOSTILE = f"before {CLIPBOARD}{TITLE}{CLEAR} after"
SHOWN = "before ^[]52;c;cHduZWQ=^G^[]2;pwned-title^G^[[2J^[[H after"

# --- a model that says what it is told ------------------------------------------------------
SYSTEM, USER, ASSISTANT, END = 256, 257, 258, 259
ROLES = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}


class ScriptedModel(FakeModel):
    """Byte tokens; after the last assistant role token it emits `script`, then END."""

    def __init__(self, script: str, n_ctx: int = 4096) -> None:
        self.script = list(script.encode())
        super().__init__(END + 1, n_ctx=n_ctx, eog=(END,),
                         pieces=[bytes([i]) for i in range(256)] + [b""] * 4,
                         logits_fn=self._next)

    def _next(self, context: Sequence[int]) -> np.ndarray:
        tokens = list(context)
        start = len(tokens) - tokens[::-1].index(ASSISTANT) if ASSISTANT in tokens else 0
        said = len(tokens) - start
        row = np.full(END + 1, -30.0, dtype=np.float32)
        row[self.script[said] if said < len(self.script) else END] = 30.0
        return row


def encode(text: str) -> list[int]:
    return list(text.encode())


def chat_tokens(messages: Sequence[Message]) -> list[int]:
    out: list[int] = []
    for m in messages:
        out += [ROLES[m["role"]], *encode(m["content"]), END]
    return out + [ASSISTANT]


def scripted_runtime(script: str) -> Runtime:
    return fake_runtime(ScriptedModel(script), chat_tokens=chat_tokens, raw_tokens=encode,
                        name="scripted")


# --- an endpoint that says it ---------------------------------------------------------------
@contextmanager
def endpoint() -> Iterator[str]:
    """A local server answering every chat request with HOSTILE (a 400 with it when the
    request mentions "fail"); yields its /v1 URL."""
    with serve(FakeEndpoint(words=[HOSTILE], refuse="fail")) as ep:
        yield ep.url + "/v1"


# --- a terminal that would obey -------------------------------------------------------------
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
