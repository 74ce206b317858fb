"""Files in the model folders of other tools (ollama, LM Studio, llama.cpp), read as hostile
input: opened in place, never copied or written, and refused in one line when they lead out of
their folder, are not regular files (a FIFO nobody writes to would hang the start), or are not
GGUF. Only the first bytes of a model file are read here; a manifest through fileio's
bounded reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import UsageError
from specchat.fileio import FileIOError, describe
from specchat.fileread import NotRegularFile, open_regular
from specchat.llm.gguf import GGUF_MAGIC, gguf_parts

# safetensors starts with an 8-byte header length, then the JSON header itself.
_SAFETENSORS_JSON = b"{"


@dataclass(frozen=True)
class LocalModel:
    """One model file another tool keeps, as `specchat models --local` lists it."""

    source: str  # "ollama", "lmstudio", "llama.cpp", "hf", "specchat"
    name: str  # what -m takes: "ollama:qwen2.5:0.5b", "lmstudio:pub/repo:Q4_K_M", ...
    path: Path  # the (first) file, as llama.cpp is to open it
    size: int  # bytes of every part


class LocalSourceError(UsageError):
    """A model folder entry that cannot be used, in one line (exit 2)."""


def inside(root: Path, path: Path, what: str) -> Path:
    """`path` with its symlinks resolved, refused when that leads out of `root`."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise LocalSourceError(f"{what}: {path} leads out of {root} (to {real}); specchat "
                               f"opens only files inside the model folder: give that file "
                               f"with -m PATH if you trust it")
    return Path(real)


def check_model_file(root: Path, path: Path, what: str) -> tuple[Path, int]:
    """The resolved path and size of a GGUF file inside `root` (every part of a split one),
    after reading only its first 9 bytes; LocalSourceError otherwise."""
    real = inside(root, path, what)
    size = 0
    for part in gguf_parts(real):
        size += _check_one(inside(root, part, what), what)
    return real, size


def _check_one(path: Path, what: str) -> int:
    try:
        with open_regular(path) as f:  # a FIFO nobody writes to is refused, not waited on
            size = os.fstat(f.fileno()).st_size
            head = f.read(9)
    except NotRegularFile as exc:
        raise LocalSourceError(f"{what}: {path} is {exc.kind}, not a model file; specchat "
                               f"reads only regular files") from None
    except FileIOError as exc:
        raise LocalSourceError(f"{what}: cannot read {path}: {exc.reason}") from None
    except OSError as exc:
        raise LocalSourceError(f"{what}: cannot read {path}: {describe(exc)}") from None
    if head[:4] != GGUF_MAGIC:
        kind = " (it looks like safetensors)" if head[8:9] == _SAFETENSORS_JSON else ""
        raise LocalSourceError(f"{what}: {path} is not a GGUF file{kind}; specchat runs GGUF "
                               f"models only")
    return size


def plain_name(part: str) -> bool:
    """A path part that names one entry: not empty, `.`, `..`, nor with separators or
    control characters (names from the user and from manifests become paths)."""
    return bool(part) and part not in (".", "..") and "/" not in part and "\\" not in part \
        and "\0" not in part and part.isprintable()


def subdirs(folder: Path) -> Iterator[Path]:
    """The folders in `folder`, sorted; none when it cannot be listed."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir() and plain_name(entry.name):
                yield Path(entry.path)
        except OSError:
            continue


def files(folder: Path) -> list[Path]:
    """The entries in `folder` that are not folders (links and FIFOs included: checked when
    used), sorted; none when it cannot be listed."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            if not entry.is_dir() and plain_name(entry.name):
                found.append(Path(entry.path))
        except OSError:
            continue
    return found
