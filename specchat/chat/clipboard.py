"""/copy: the last answer or one of its code blocks, to whatever clipboard exists here.

Tries the platform's tools first (they reach the real clipboard), then OSC 52, which asks the
terminal itself to set the clipboard and works over ssh and tmux, but only on a terminal.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

# ```lang\n ... ``` fences (also ~~~); an unclosed last fence still counts as a block.
_FENCE = re.compile(r"^(?P<fence>```+|~~~+)[^\n]*\n(?P<body>.*?)(?:^(?P=fence)[ \t]*$|\Z)",
                    re.MULTILINE | re.DOTALL)


def code_blocks(text: str) -> list[str]:
    """The bodies of fenced code blocks, in order."""
    return [m.group("body").rstrip("\n") for m in _FENCE.finditer(text)]


def _tools() -> list[Sequence[str]]:
    tools: list[Sequence[str]] = []
    if sys.platform == "darwin":
        tools.append(["pbcopy"])
    if os.environ.get("WAYLAND_DISPLAY"):
        tools.append(["wl-copy"])
    if os.environ.get("DISPLAY"):
        tools += [["xclip", "-selection", "clipboard"], ["xsel", "--clipboard", "--input"]]
    if sys.platform.startswith(("win", "cygwin")):
        tools.append(["clip"])
    return tools


def copy(text: str, terminal: TextIO | None) -> str:
    """Copy `text`; returns how it was done. Raises OSError with a clear note when it can't."""
    for argv in _tools():
        if shutil.which(argv[0]) is None:
            continue
        try:
            # A clipboard owner (xclip) may linger as a daemon: never wait on its output.
            subprocess.run(argv, input=text.encode("utf-8"), check=True, timeout=5,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return argv[0]
        except (OSError, subprocess.SubprocessError):
            continue
    if terminal is not None and terminal.isatty():
        payload = base64.b64encode(text.encode("utf-8")).decode("ascii")
        seq = f"\x1b]52;c;{payload}\x07"
        if os.environ.get("TMUX"):
            seq = "\x1bPtmux;" + seq.replace("\x1b", "\x1b\x1b") + "\x1b\\"
        terminal.write(seq)
        terminal.flush()
        return "the terminal (OSC 52; your terminal must allow it)"
    raise OSError("no clipboard available: install wl-clipboard, xclip or xsel, "
                  "or run specchat in a terminal that supports OSC 52")
