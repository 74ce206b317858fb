"""GGUF files on disk, before llama.cpp sees them: the magic check and split-file parts."""

from __future__ import annotations

import re
from pathlib import Path

from specchat.errors import ModelError

GGUF_MAGIC = b"GGUF"


def check_gguf_file(path: Path) -> Path:
    """`path` if it is a readable GGUF file, else a one-line ModelError that says what to do."""
    if not path.exists():
        raise ModelError(f"model file not found: {path} does not exist; give a path to a "
                         f".gguf file or a preset name (see `specchat models`)")
    if not path.is_file():
        raise ModelError(f"{path} is a folder, not a model file; give a path to a .gguf file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF model file (it does not start with 'GGUF'); "
                         f"convert it with llama.cpp or pick a .gguf file")
    return path


_SPLIT_PART = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)


def gguf_parts(path: Path) -> list[Path]:
    """Every file of a split GGUF (llama.cpp loads the rest from the first), else [path]."""
    match = _SPLIT_PART.match(path.name)
    if match is None:
        return [path]
    total = int(match["total"])
    return [path.with_name(f"{match['stem']}-{i:05d}-of-{total:05d}.gguf")
            for i in range(1, total + 1)]
