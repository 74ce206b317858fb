"""Driving the REPL as a person at the keyboard would, through prompt-toolkit's pipe input."""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from specchat.chat import repl
from specchat.chat.session import ChatSession

ENTER = "\r"
ESC_ENTER = "\x1b\r"
CTRL_C = "\x03"
CTRL_D = "\x04"


def drive(session: ChatSession, keys: str, input_lines: Path | None) -> int:
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        prompt = repl.make_prompt(session, input_lines=input_lines, input=pipe,
                                  output=DummyOutput())
        return repl.run(session, prompt)
