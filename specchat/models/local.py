"""The models other tools keep on this machine: ollama, LM Studio and llama.cpp's cache,
opened in place (inventory.py adds the Hugging Face cache and specchat's own presets).

`-m ollama:...`, `-m lmstudio:...` and `-m llamacpp:...` name the first three; resolve.py asks
here what they mean. Nothing here copies, moves or writes a model file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from specchat.models import llamacache, lmstudio, ollama
from specchat.models.localfiles import LocalModel, LocalSourceError

# prefix -> the module that reads that source: find() and resolve(spec)
_SOURCES = {ollama.PREFIX: ollama, lmstudio.PREFIX: lmstudio, llamacache.PREFIX: llamacache}
PREFIXES = tuple(_SOURCES)


def is_local_name(name: str) -> bool:
    """Whether `name` is written for one of the other tools' folders (`ollama:...`)."""
    return name.startswith(PREFIXES)


def resolve_local(name: str) -> Path:
    """The checked file a local name means; LocalSourceError (one line, exit 2) if none."""
    for prefix, source in _SOURCES.items():
        if name.startswith(prefix):
            return source.resolve(name)
    raise LocalSourceError(f"{name!r} is not a local model name ({', '.join(PREFIXES)})")


def local_models() -> tuple[list[LocalModel], list[str]]:
    """Every usable model the other tools keep, and one line for each entry refused."""
    found: list[LocalModel] = []
    refused: list[str] = []
    finders: list[Callable[[], Iterator[LocalModel | LocalSourceError]]] = [
        ollama.find, lmstudio.find, llamacache.find]
    for finder in finders:
        for item in finder():
            if isinstance(item, LocalSourceError):
                refused.append(str(item))
            else:
                found.append(item)
    return found, refused
