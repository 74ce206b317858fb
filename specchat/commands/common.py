"""What `ask`, `chat` and `bench` share: which options they take, and turning resolved
settings into the runtime's load settings and the engine's options.

The options themselves are declared once, in specchat.options.
"""

from __future__ import annotations

from specchat.config import Settings
from specchat.engine.options import GenerationOptions
from specchat.errors import UsageError
from specchat.options import CHAT, GENERATION, MODEL, generation_options, group
from specchat.runtime import LoadSettings

ASK_OPTIONS = group(MODEL, GENERATION)
CHAT_OPTIONS = group(MODEL, GENERATION, CHAT)


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
