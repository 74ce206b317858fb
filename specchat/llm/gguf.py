"""GGUF files on disk, before llama.cpp sees them: the magic check, split-file parts, and
what a file holds (a fingerprint of its content, for the prompt cache's keys)."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from specchat import fileio, fileread
from specchat.errors import ModelError
from specchat.llm.vocab import VocabPrint

GGUF_MAGIC = b"GGUF"


def check_gguf_file(path: Path) -> Path:
    """`path` if it is a readable GGUF file, else a one-line ModelError that says what to do."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ModelError(f"model file not found: {path} does not exist; give a path to a "
                         f".gguf file or a preset name (see `specchat models`)") from None
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {fileio.describe(exc)}") from None
    if not stat.S_ISREG(mode):  # /dev/zero, a FIFO: never opened, it could hang or not end
        kind = "a folder" if stat.S_ISDIR(mode) else fileio.file_kind(mode)
        raise ModelError(f"{path} is {kind}, not a model file; give a path to a .gguf file")
    try:
        magic = fileread.read_head(path, len(GGUF_MAGIC))
    except (OSError, fileio.FileIOError) as exc:  # gone or replaced since the stat
        why = fileio.describe(exc) if isinstance(exc, OSError) else exc.reason
        raise ModelError(f"cannot read model file {path}: {why}") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF model file (it does not start with 'GGUF'); "
                         f"convert it with llama.cpp or pick a .gguf file")
    return path


@dataclass(frozen=True)
class GgufSummary:
    """What a listing shows of a model file and what draft pairing needs, read from its
    header alone (files.read_summary)."""

    arch: str  # general.architecture: "qwen2", "llama", "gemma3", "clip" (a projector)
    quant: str  # the file type: "Q4_K_M", "Q8_0", "F16"; "?" when the file does not say
    vocab: VocabPrint


HEAD_BYTES = 16 << 20  # the header (metadata, vocabulary, tensor index: 2-7 MB here) and more
SAMPLES = 256  # blocks read evenly across the rest of the file
SAMPLE_BYTES = 16 << 10


def content_fingerprint(path: Path) -> str:
    """What the file holds, in 32 hex digits: its size, its first 16 MiB whole (a GGUF header
    with its vocabulary fits well inside) and 256 blocks of 16 KiB spread evenly over the
    tensor data after it, 20 MB read and hashed (tens of milliseconds from the page cache).

    A file replaced by another model, whatever its name, size and mtime, has another
    fingerprint: another model's tensors differ in every block. The file's identity (inode
    and change time, which no copy or `touch` can carry over) is folded in too, so a change
    that happens to miss every sampled block still changes the key.
    """
    digest = hashlib.sha256()
    with fileread.open_regular(path) as handle:  # a FIFO in the model's place cannot hang us
        st = os.fstat(handle.fileno())
        digest.update(f"{st.st_size}|{st.st_dev}|{st.st_ino}|{st.st_ctime_ns}|".encode())
        digest.update(handle.read(HEAD_BYTES))
        rest = st.st_size - HEAD_BYTES
        if rest > 0:
            for i in range(SAMPLES):
                handle.seek(HEAD_BYTES + rest * i // SAMPLES)
                digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()[:32]


_SPLIT_PART = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)


def gguf_parts(path: Path) -> list[Path]:
    """Every file of a split GGUF (llama.cpp loads the rest from the first), else [path]."""
    match = _SPLIT_PART.match(path.name)
    if match is None:
        return [path]
    total = int(match["total"])
    return [path.with_name(f"{match['stem']}-{i:05d}-of-{total:05d}.gguf")
            for i in range(1, total + 1)]
