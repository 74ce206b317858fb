"""What `ask`, `chat` and `bench` share: which options they take, turning resolved settings
into the engine's options and a remote backend, reading a piped prompt, and writing a
bench's --json report.

The options themselves are declared once, in specchat/settings/schema.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from specchat import fileio, fileread
from specchat.chat.attach import MAX_BYTES
from specchat.engine.options import GenerationOptions
from specchat.errors import UsageError
from specchat.settings.file import Settings
from specchat.settings.schema import (
    ASK,
    CHAT,
    GENERATION,
    MODEL,
    REMOTE,
    RETENTION,
    generation_options,
    group,
)
from specchat.term import output

if TYPE_CHECKING:
    from specchat.backend.remote import RemoteRuntime

FilesFlag = Annotated[Optional[list[str]], typer.Option(
    "--file", "-f", metavar="PATH", show_default=False,
    help="Put this file's text in the message, before the prompt (repeatable; - reads "
    "stdin).")]

ASK_OPTIONS = group(MODEL, GENERATION, ASK, REMOTE, RETENTION)
CHAT_OPTIONS = group(MODEL, GENERATION, CHAT, REMOTE, RETENTION)


def options_from(settings: Settings) -> GenerationOptions:
    """The engine's options from resolved settings (bad combinations: a usage error)."""
    return generation_options(settings.values)


def open_remote(settings: Settings, options: GenerationOptions) -> RemoteRuntime:
    """--endpoint: the OpenAI-compatible server that answers instead of local models."""
    from specchat.backend.remote import RemoteRuntime

    if settings.sources.get("draft") == "flag":
        raise UsageError("--draft has no effect with --endpoint: the server chooses its own "
                         "draft (specchat serve -d NAME, or vLLM's speculative config)")
    if settings.sources.get("spec") == "flag":
        raise UsageError("--spec has no effect with --endpoint: the server chooses how it "
                         "speculates (specchat serve --spec MODE)")
    return RemoteRuntime(settings["endpoint"], settings.get("api_key"), settings.get("model"),
                         options, timeout=settings["timeout"])


def read_piped() -> bytes:
    """The prompt piped on stdin, at most what one attachment may be (`ask < /dev/zero` is
    one line, not all the memory); a larger one is a usage error saying what to do."""
    try:
        return fileread.read_stream(sys.stdin.buffer, MAX_BYTES, "stdin")
    except fileio.FileIOError as exc:
        raise UsageError(f"{exc}: a prompt is at most that; pipe the part that matters "
                         "(head -c, grep, a diff of fewer files)") from None


def write_report(json_file: str, document: str, *, private: bool = True) -> None:
    """A bench's --json document: to stdout for "-", else written atomically to the file named
    (asked for by name, so an existing file is replaced); private where it holds prompts and
    answers. A failure is a FileIOError: one line."""
    if json_file == "-":
        output.write(document + "\n")
        return
    fileio.atomic_write(Path(json_file), document + "\n", private=private)
    print(f"specchat: wrote {json_file}", file=sys.stderr)
