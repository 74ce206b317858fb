"""A one-shot command starts without the terminal chat's modules: prompt_toolkit and the
markdown renderer cost ~90 ms of every `specchat ask` in a pipeline otherwise."""

from __future__ import annotations

import subprocess
import sys

CHAT_ONLY = ("prompt_toolkit", "markdown_it", "specchat.chat.render", "specchat.chat.repl",
             "specchat.chat.session")

PROBE = """
import sys
from specchat import cli
cli._register_commands()
print(" ".join(name for name in {names!r} if name in sys.modules))
"""


def loaded_after_registering_every_command(names: tuple[str, ...]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(names=names)], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return out.split()


def test_registering_the_commands_leaves_the_chat_ui_unimported() -> None:
    assert loaded_after_registering_every_command(CHAT_ONLY) == []


def test_the_probe_sees_a_module_that_is_imported() -> None:
    assert loaded_after_registering_every_command(("typer", "specchat.commands.ask")) == [
        "typer", "specchat.commands.ask"]
