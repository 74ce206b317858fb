"""What the headers of model files say (architecture, quantization, vocabulary print), read once
per file and kept: reading one costs ~0.3 s (its whole vocabulary), which fifty local models
would make a 15-second start. A loaded model's end-of-generation ids are kept in the same entry
(finding them asks llama.cpp about every id: ~45 ms a start for 150k ids). An entry is keyed by
the file's resolved path, size, mtime and inode, so a file replaced or rewritten is read again.
The memo is specchat's own file (fileio.py writes it); a damaged one is only a slower start.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from specchat import fileio, fileread
from specchat.errors import ModelError, SpecchatError
from specchat.llm.gguf import GgufSummary
from specchat.llm.vocab import VocabPrint
from specchat.paths import local_headers_file

VERSION = 1
MEMO_LIMIT = 16 << 20  # ~3 KB an entry: thousands of models


class Headers:
    """Summaries of model files, from the memo or read now (and then remembered)."""

    def __init__(self, memo: Path | None = None) -> None:
        self.memo = memo or local_headers_file()
        self.entries = _load(self.memo)
        self.changed: set[str] = set()  # the entries this run wrote (save merges only those)
        self.read_seconds = 0.0  # spent reading headers not in the memo, this run

    def summary(self, path: Path, *, read: bool = True) -> GgufSummary | None:
        """The file's summary; None when it is not remembered and `read` is False.
        ModelError when llama.cpp cannot read its header (remembered too)."""
        stamp = _stamp(path)
        entry = self._current(path, stamp)
        if entry is not None:
            if "error" in entry:
                raise ModelError(str(entry["error"]))
            found = _from_entry(entry)
            if found is not None:
                return found
        if not read:
            return None
        from specchat.llm import read_summary  # llama.cpp loads only when a header is read

        started = time.monotonic()
        try:
            summary: GgufSummary = read_summary(path)
        except SpecchatError as exc:
            self.entries[str(path)] = {"stamp": stamp, "error": str(exc)}
            self.changed.add(str(path))
            raise ModelError(str(exc)) from None
        finally:
            self.read_seconds += time.monotonic() - started
        self._keep(path, stamp, _to_entry(summary))
        return summary

    def remember(self, path: Path, summary: GgufSummary) -> None:
        """Keep a summary made from a model loaded anyway (llm.files.summary_of)."""
        self._keep(path, _stamp(path), _to_entry(summary))

    def eog(self, path: Path, n_vocab: int) -> frozenset[int] | None:
        """The end-of-generation ids remembered for this file (None: not remembered, or not
        ids of a vocabulary of n_vocab)."""
        entry = self._current(path, _stamp(path))
        ids = None if entry is None else entry.get("eog")
        if not isinstance(ids, list) or not all(
                type(i) is int and 0 <= i < n_vocab for i in ids):
            return None
        return frozenset(ids)

    def remember_eog(self, path: Path, eog: frozenset[int]) -> None:
        self._keep(path, _stamp(path), {"eog": sorted(eog)})

    def _keep(self, path: Path, stamp: str, fields: dict[str, Any]) -> None:
        """Add fields to the file's entry, starting afresh when the file changed (and
        forgetting an error: what is kept now was read from the file)."""
        entry = self._current(path, stamp) or {}
        kept = {k: v for k, v in entry.items() if k != "error"}
        self.entries[str(path)] = {**kept, **fields, "stamp": stamp}
        self.changed.add(str(path))

    def _current(self, path: Path, stamp: str) -> dict[str, Any] | None:
        """The file's entry, if it was made from the file as it is now (same stamp)."""
        entry = self.entries.get(str(path))
        return entry if isinstance(entry, dict) and entry.get("stamp") == stamp else None

    def knows(self, path: Path) -> bool:
        """Whether what the file's header says (or that it cannot be read) is remembered."""
        try:
            return self._current(path, _stamp(path)) is not None
        except OSError:
            return True  # a file that is gone needs no reading

    def save(self) -> None:
        """Write what this run read into the memo (best effort), forgetting files that are
        gone. Merged into the memo as it is now, with its directory locked: another process
        that read other files meanwhile keeps them."""
        if not self.changed:
            return
        try:
            with fileio.locked_directory(self.memo.parent, private=False):
                merged = {**_load(self.memo),
                          **{p: self.entries[p] for p in self.changed}}
                kept = {p: e for p, e in merged.items() if os.path.exists(p)}
                fileio.atomic_write(self.memo, json.dumps({"version": VERSION, "files": kept}),
                                    private=False)
        except fileio.FileIOError:
            pass
        self.changed = set()

def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _load(memo: Path) -> dict[str, Any]:
    try:
        data = json.loads(fileread.read_limited(memo, MEMO_LIMIT))
    except (OSError, ValueError, fileio.FileIOError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _to_entry(summary: GgufSummary) -> dict[str, Any]:
    v = summary.vocab
    return {"arch": summary.arch, "quant": summary.quant,
            "n_tokens": v.n_tokens, "head": v.head, "tails": list(v.tails)}


def _from_entry(entry: dict[str, Any]) -> GgufSummary | None:
    try:
        tails = tuple(str(t) for t in entry["tails"])
        vocab = VocabPrint(int(entry["n_tokens"]), str(entry["head"]), tails)
        return GgufSummary(str(entry["arch"]), str(entry["quant"]), vocab)
    except (KeyError, TypeError, ValueError):
        return None  # an entry of another shape: read the header again
