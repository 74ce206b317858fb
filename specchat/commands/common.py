"""What `ask`, `chat` and `bench` share: which options they take, and turning resolved
settings into the runtime's load settings and the engine's options.

The options themselves are declared once, in specchat.options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from specchat.config import Settings
from specchat.engine.options import GenerationOptions
from specchat.errors import UsageError
from specchat.options import (
    ASK,
    CHAT,
    GENERATION,
    MODEL,
    REMOTE,
    generation_options,
    group,
)
from specchat.runtime import LoadSettings

FilesFlag = Annotated[Optional[list[str]], typer.Option(
    "--file", "-f", metavar="PATH", show_default=False,
    help="Put this file's text in the message, before the prompt (repeatable; - reads "
    "stdin).")]


if TYPE_CHECKING:
    from specchat.remote import RemoteRuntime

ASK_OPTIONS = group(MODEL, GENERATION, ASK, REMOTE)
CHAT_OPTIONS = group(MODEL, GENERATION, CHAT, REMOTE)


def load_settings(settings: Settings, *, quiet: bool = False) -> LoadSettings:
    """LoadSettings from resolved options; values llama.cpp would choke on are usage errors."""
    threads = settings.get("threads")
    if threads is not None and threads < 1:
        raise UsageError("--threads must be >= 1")
    return LoadSettings(model=settings.get("model"), draft=settings.get("draft"),
                        spec=settings.get("spec", "auto"), n_ctx=settings.get("ctx", 4096),
                        n_gpu_layers=settings.get("n_gpu_layers"), threads=threads,
                        verbose=bool(settings.get("verbose")), quiet=quiet)


def options_from(settings: Settings) -> GenerationOptions:
    """The engine's options from resolved settings (bad combinations: a usage error)."""
    return generation_options(settings.values)


DEFAULTS = GenerationOptions()


def open_remote(settings: Settings, options: GenerationOptions) -> RemoteRuntime:
    """--endpoint: the OpenAI-compatible server that answers instead of local models."""
    from specchat.remote import RemoteRuntime

    if settings.sources.get("draft") == "flag":
        raise UsageError("--draft has no effect with --endpoint: the server chooses its own "
                         "draft (specchat serve -d NAME, or vLLM's speculative config)")
    return RemoteRuntime(settings["endpoint"], settings.get("api_key"), settings.get("model"),
                         options)
