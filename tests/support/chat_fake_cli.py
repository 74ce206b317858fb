"""`python -m tests.support.chat_fake_cli chat ...`: the real CLI with the fake chat model loaded.

Used by tests that need a separate process (kill -9, a real terminal under tmux) without a
real GGUF file. CHAT_FAKE_DELAY=seconds slows every model call, so a test can act mid-answer;
CHAT_FAKE_ANSWER=text makes the model answer exactly that text (`ask` too).
"""

from __future__ import annotations

import os
import sys

from specchat import cli
from specchat.backend.local import Runtime
from specchat.commands import ask as ask_cmd
from specchat.commands import chat as chat_cmd
from specchat.settings.load import LoadSettings
from tests.support import chat_fakes, hostile


def open_fake(settings: LoadSettings) -> Runtime:
    script = os.environ.get("CHAT_FAKE_ANSWER")
    if script is not None:  # a model that answers exactly this text (tests/support/hostile.py)
        return hostile.scripted_runtime(script)
    delay = float(os.environ.get("CHAT_FAKE_DELAY", "0"))
    return chat_fakes.runtime(chat_fakes.ChatModel(delay=delay))


if __name__ == "__main__":
    chat_cmd.open_runtime = open_fake  # type: ignore[assignment]
    ask_cmd.open_runtime = open_fake  # type: ignore[assignment]
    cli.main(sys.argv[1:])
