"""Names a model option can take, for shell completion and the chat's /model and /draft."""

from __future__ import annotations

from pathlib import Path

from specchat.errors import SpecchatError
from specchat.models.local import PREFIXES, local_models


def model_candidates(incomplete: str = "") -> list[str]:
    """Preset names, then the .gguf files in the cache, then the models other tools keep
    (once what is typed could start one of their names), then (for a path) matching files.

    Never raises: a broken models.toml must not turn a Tab press into a traceback.
    """
    from specchat.models.presets import load_presets
    from specchat.paths import model_cache_dir

    out: list[str] = []
    try:
        out += sorted(load_presets())
    except (SpecchatError, OSError):
        pass
    try:
        out += sorted(str(p) for p in model_cache_dir().glob("*.gguf") if p.is_file())
    except OSError:
        pass
    if incomplete.startswith(PREFIXES) or any(p.startswith(incomplete) for p in PREFIXES):
        out += _local_names()
    if any(s in incomplete for s in ("/", "~")) or incomplete.startswith("."):
        out += _path_matches(incomplete)
    return [c for c in dict.fromkeys(out) if c.startswith(incomplete)]  # in order, once


def _local_names() -> list[str]:
    """The models other tools keep (ollama:..., lmstudio:..., llamacpp:...): folder listings
    and manifests only, no model header is read."""
    try:
        return sorted(m.name for m in local_models()[0])
    except (SpecchatError, OSError):
        return []


def _path_matches(incomplete: str) -> list[str]:
    """Directories and .gguf files under what has been typed so far."""
    head, _, tail = incomplete.rpartition("/")
    base = Path(head or "/").expanduser() if incomplete.startswith(("/", "~")) or head \
        else Path(".")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    prefix = f"{head}/" if head or incomplete.startswith("/") else ""
    return [prefix + e.name + ("/" if e.is_dir() else "") for e in entries
            if e.name.startswith(tail) and (e.is_dir() or e.name.endswith(".gguf"))]
