"""`python -m tests.support.chat_fake_cli chat ...`: the real CLI with the fake chat model loaded.

Used by tests that need a separate process (kill -9, a real terminal under tmux) without a
real GGUF file. CHAT_FAKE_DELAY=seconds slows every model call, so a test can act mid-answer;
CHAT_FAKE_ANSWER=text makes the model answer exactly that text (`ask` too).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from specchat import cli
from specchat.backend.local import Runtime
from specchat.commands import ask as ask_cmd
from specchat.commands import chat as chat_cmd
from specchat.settings.load import LoadSettings
from tests.support import chat_fakes, hostile


class SlowModel(chat_fakes.ChatModel):
    delay = float(os.environ.get("CHAT_FAKE_DELAY", "0"))

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        time.sleep(self.delay)
        return super().eval(tokens, logit_rows)


def open_fake(settings: LoadSettings) -> Runtime:
    script = os.environ.get("CHAT_FAKE_ANSWER")
    if script is not None:  # a model that answers exactly this text (tests/support/hostile.py)
        return hostile.scripted_runtime(script)
    return chat_fakes.runtime(SlowModel())


if __name__ == "__main__":
    chat_cmd.open_runtime = open_fake  # type: ignore[assignment]
    ask_cmd.open_runtime = open_fake  # type: ignore[assignment]
    cli.main(sys.argv[1:])
