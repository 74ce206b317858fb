"""The on-disk prompt cache: saved KV states of long prompts, so that the next one-shot call
that shares a long prefix (the same system prompt and file, another question) skips most of
its prefill.

One file per saved state, `<model>-<tokens>.kv` in paths.prompt_cache_dir(): a header naming the
model state key and the exact token ids, then llama.cpp's opaque state blob, with a CRC over
both. Lookup reads only the headers and picks the entry sharing the longest prefix with the
new prompt; the model then loads it and cuts it back to that common prefix, so an entry
serves every prompt that starts the same way, whatever follows. Files are written through
fileio.atomic_write (a killed process leaves no file that looks complete; two processes
writing the same entry each rename a whole file), a file that fails any check is removed and
never loaded, and the directory is kept under a size limit by evicting the least recently
used entries (a hit refreshes the file's mtime).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeGuard

import numpy as np

from specchat.engine.protocol import common_prefix
from specchat.errors import SpecchatError
from specchat.fileio import Buffer, FileIOError, atomic_write, make_dirs
from specchat.fileread import open_regular

MAGIC = b"SPECCHAT-KV1"
SUFFIX = ".kv"
DEFAULT_LIMIT = 2 * 1024**3  # a 3000-token Qwen 1.5B prompt is ~90 MB: about twenty of them
MIN_NEW_TOKENS = 256  # prefill work below which a new entry is not worth its disk space
MIN_GAIN = 32  # cached tokens a load must add over what the model already holds
STALE_TMP_SECONDS = 3600  # a temporary file this old belongs to a process that died


class StatefulModel(Protocol):
    """What the cache needs from a model (llm.LlamaModel; fakes in tests)."""

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def state_key(self) -> str: ...

    def save_state(self) -> Buffer: ...

    def load_state(self, tokens: Sequence[int], blob: Buffer) -> None: ...

    def truncate(self, n: int) -> None: ...


def keeps_states(model: object) -> TypeGuard[StatefulModel]:
    """Whether `model` is a StatefulModel, state_key looked for on its class: isinstance()
    with the protocol reads every member on Python 3.11, and reading state_key fingerprints
    the model file (~60 ms)."""
    members = ("tokens", "n_ctx", "save_state", "load_state", "truncate")
    return hasattr(type(model), "state_key") and all(hasattr(model, m) for m in members)


@dataclass(frozen=True)
class Entry:
    path: Path
    tokens: tuple[int, ...]
    data_offset: int  # where the token ids start; the blob follows them
    blob_len: int
    crc: int


class PromptCache:
    """Saved prompt states in `directory`, at most `limit` bytes in all (0: off)."""

    def __init__(self, directory: Path, limit: int = DEFAULT_LIMIT,
                 min_new_tokens: int = MIN_NEW_TOKENS) -> None:
        self.directory = Path(directory)
        self.limit = limit
        self.min_new_tokens = min_new_tokens

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    # --- lookup -------------------------------------------------------------------------------
    def restore(self, model: StatefulModel, tokens: Sequence[int]) -> int:
        """Load the saved state sharing the longest prefix with `tokens` into `model` and cut it
        back to that prefix; returns the tokens it holds from the cache (0: nothing loaded).

        Nothing is loaded unless it adds at least MIN_GAIN tokens to the prefix the model
        already holds. An entry that fails a check is removed, and the model then holds
        nothing (never part of a state).
        """
        have = common_prefix(model.tokens, tokens)
        # The model's key fingerprints its file (~60 ms after a load): not for a prompt no
        # entry could add MIN_GAIN tokens to, nor for a cache with no entries.
        names = self._names() if self.enabled and len(tokens) - have >= MIN_GAIN else []
        if not names:
            return 0
        best, best_len = None, have + MIN_GAIN - 1
        for entry in self._entries(model.state_key, names):
            if len(entry.tokens) > model.n_ctx:
                continue
            shared = common_prefix(entry.tokens, tokens)
            if shared > best_len:
                best, best_len = entry, shared
        if best is None:
            return 0
        blob = self._read_blob(best)
        if blob is None:
            return 0
        try:
            model.load_state(best.tokens, blob)
        except SpecchatError:
            _remove(best.path)
            return 0
        model.truncate(best_len)
        _touch(best.path)
        return best_len

    def _names(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.directory) if n.endswith(SUFFIX)]
        except OSError:
            return []

    def _entries(self, key: str, names: list[str]) -> list[Entry]:
        """The entries among `names` (the directory's, _names) saved under `key`."""
        prefix = _key_hash(key) + "-"
        entries = []
        for name in (n for n in names if n.startswith(prefix)):
            entry = _read_header(self.directory / name, key)
            if entry is not None:
                entries.append(entry)
        return entries

    def _read_blob(self, entry: Entry) -> memoryview | None:
        """The state blob, or None (and the file removed) if it fails its CRC. Read into one
        buffer that load_state takes as it is: a state can be hundreds of MB."""
        n_ids = 4 * len(entry.tokens)
        data = bytearray(n_ids + entry.blob_len)  # the header checked this against the size
        try:
            with open_regular(entry.path) as f:
                f.seek(entry.data_offset)
                whole = f.readinto(data) == len(data) and not f.read(1)
        except (OSError, FileIOError):
            return None  # evicted (or replaced by a FIFO) meanwhile: a miss
        if not whole or zlib.crc32(data) != entry.crc:
            _remove(entry.path)
            return None
        return memoryview(data)[n_ids:]

    # --- saving -------------------------------------------------------------------------------
    def save(self, model: StatefulModel, evaluated: int) -> Path | None:
        """Save the state of everything the model holds, if its prefill did enough work
        (`evaluated` new tokens) to be worth it; then evict down to the limit."""
        tokens = tuple(model.tokens)
        if not self.enabled or evaluated < self.min_new_tokens or not tokens:
            return None
        key = model.state_key
        path = self.directory / entry_name(key, tokens)
        if path.exists():
            _touch(path)
            return path
        blob = model.save_state()
        data = _encode(key, tokens, blob)
        if sum(len(part) for part in data) > self.limit:
            return None
        try:
            make_dirs(self.directory, private=True)
            atomic_write(path, data, private=True)
        except (FileIOError, OSError):
            return None  # a cache: a full disk costs speed, never the answer
        self.evict()
        return path

    def evict(self) -> None:
        """Remove the least recently used entries until the rest fit the limit; remove
        temporary files left by processes that died while writing."""
        try:
            scan = list(os.scandir(self.directory))
        except OSError:
            return
        now = time.time()
        files = []
        for item in scan:
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if item.name.startswith(".") and item.name.endswith(".tmp"):
                if now - st.st_mtime > STALE_TMP_SECONDS:
                    _remove(Path(item.path))
            elif item.name.endswith(SUFFIX) and item.is_file(follow_symlinks=False):
                files.append((st.st_mtime, st.st_size, Path(item.path)))
        total = 0
        for _, size, path in sorted(files, reverse=True):
            total += size
            if total > self.limit:
                _remove(path)

    def clear(self) -> int:
        """Remove every entry; returns how many."""
        removed = 0
        for path in self.directory.glob(f"*{SUFFIX}"):
            removed += int(_remove(path))
        return removed


# --- the file format ----------------------------------------------------------------------------
def entry_name(key: str, tokens: Sequence[int]) -> str:
    ids = np.asarray(tokens, dtype="<i4").tobytes()
    digest = hashlib.sha256(key.encode() + b"\0" + ids).hexdigest()[:32]
    return f"{_key_hash(key)}-{digest}{SUFFIX}"


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _encode(key: str, tokens: Sequence[int], blob: Buffer) -> list[Buffer]:
    """The entry's file as two parts written one after the other: the blob is not copied."""
    ids = np.asarray(tokens, dtype="<i4").tobytes()
    header = json.dumps({"key": key, "n_tokens": len(tokens), "blob_len": len(blob),
                         "crc": zlib.crc32(blob, zlib.crc32(ids))}).encode()
    return [MAGIC + struct.pack("<I", len(header)) + header + ids, blob]


def _read_header(path: Path, key: str) -> Entry | None:
    """The entry's header and token ids; None for another model's entry, a vanished file, or a
    damaged one (which is removed)."""
    try:
        with open_regular(path) as f:  # a FIFO under an entry's name is no entry
            size = os.fstat(f.fileno()).st_size
            head = f.read(len(MAGIC) + 4)
            if len(head) < len(MAGIC) + 4 or not head.startswith(MAGIC):
                raise ValueError("bad magic")
            (hlen,) = struct.unpack("<I", head[len(MAGIC):])
            meta = json.loads(f.read(hlen))
            if meta["key"] != key:
                return None  # a hash prefix collision: someone else's entry
            n = int(meta["n_tokens"])
            offset = len(MAGIC) + 4 + hlen
            if size != offset + 4 * n + int(meta["blob_len"]):
                raise ValueError("truncated")
            ids = np.frombuffer(f.read(4 * n), dtype="<i4")
    except (OSError, FileIOError):
        return None
    except (ValueError, KeyError, TypeError, struct.error):
        _remove(path)
        return None
    return Entry(path, tuple(int(t) for t in ids), offset, int(meta["blob_len"]),
                 int(meta["crc"]))


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True
