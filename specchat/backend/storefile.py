"""The file format of the drafting store's segments (draftstore.py says how they are used).

One segment file, little-endian:

    b"SPCHDRF1" | u32 header length | JSON header | zero padding to 8 bytes
    tokens     u32[tokens]     records of token ids, each closed by SEP  (padded to 8)
    keys       u64[keys]       k-gram hashes, sorted (engine/suffix.py)
    positions  u32[keys]       where each k-gram ends                    (padded to 8)
    rec_start  u64[records]    where each record starts in `tokens`
    rec_length u32[records]    its length (without SEP)                  (padded to 8)
    rec_time   f64[records]    when it was written (seconds since the epoch)
    rec_tag    u64[records]    what names it for deletion (draftstore.tag_of)

The header says the counts, the k-gram length, the vocabulary and which segment files this
one replaces ("covers"). A file is written whole and atomically (fileio.atomic_write), read
by mmap, and checked before use: a file whose sizes do not add up, or that any read fails
on, is not a segment. What it contains is still hostile (engine/suffix.py guards lookups).

Only a regular file is ever opened (a FIFO named x.seg would block a plain open for ever),
and what reading finds says whether the file may be deleted: only a segment of this format
version, vocabulary and k-gram length whose sizes do not add up is provably ours and broken.
A file that cannot be opened now (too many open files, no permission) or that another
version wrote is skipped and kept.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specchat import fileio, fileread
from specchat.engine.suffix import SEP, Segment, build_index

MAGIC = b"SPCHDRF1"
VERSION = 1
_LAYOUT = (("tokens", "tokens", "<u4"), ("keys", "keys", "<u8"), ("positions", "keys", "<u4"),
           ("rec_start", "records", "<u8"), ("rec_length", "records", "<u4"),
           ("rec_time", "records", "<f8"), ("rec_tag", "records", "<u8"))
MAX_HEADER = 1 << 20


@dataclass(frozen=True)
class Records:
    """The records of a segment, oldest first."""

    start: np.ndarray
    length: np.ndarray
    time: np.ndarray
    tag: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class SegmentFile:
    """A segment as read from (or about to be written to) disk."""

    segment: Segment
    records: Records
    covers: tuple[str, ...]  # names of the segment files this one replaces
    vocab: str
    size: int = 0  # bytes on disk (0: not written yet)
    name: str = ""  # file name without the suffix

    @property
    def newest(self) -> float:
        return float(self.records.time.max()) if len(self.records) else 0.0


def build(records: list[tuple[np.ndarray, float, int]], vocab: str, k: int,
          covers: tuple[str, ...] = ()) -> SegmentFile:
    """A segment of (tokens, time, tag) records, oldest first, with its k-gram index."""
    parts: list[np.ndarray] = []
    start, length = [], []
    at = 0
    for tokens, _, _ in records:
        parts += [np.asarray(tokens, dtype=np.uint32), np.array([SEP], dtype=np.uint32)]
        start.append(at)
        length.append(len(tokens))
        at += len(tokens) + 1
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
    keys, positions = build_index(tokens, k)
    table = Records(np.array(start, dtype=np.uint64), np.array(length, dtype=np.uint32),
                    np.array([r[1] for r in records], dtype=np.float64),
                    np.array([r[2] for r in records], dtype=np.uint64))
    return SegmentFile(Segment(tokens, keys, positions), table, covers, vocab)


def encode(seg: SegmentFile, k: int) -> bytes:
    arrays = {"tokens": seg.segment.tokens, "keys": seg.segment.keys,
              "positions": seg.segment.positions, "rec_start": seg.records.start,
              "rec_length": seg.records.length, "rec_time": seg.records.time,
              "rec_tag": seg.records.tag}
    header = json.dumps({"version": VERSION, "k": k, "vocab": seg.vocab,
                         "tokens": len(seg.segment.tokens), "keys": len(seg.segment.keys),
                         "records": len(seg.records), "covers": list(seg.covers)}).encode()
    out = [MAGIC, struct.pack("<I", len(header)), header]
    size = 12 + len(header)
    out.append(b"\0" * (-size % 8))
    for name, _, dtype in _LAYOUT:
        data = np.ascontiguousarray(arrays[name], dtype=dtype).tobytes()
        out += [data, b"\0" * (-len(data) % 8)]
    return b"".join(out)


@dataclass(frozen=True)
class Found:
    """What reading one file of a store found: a segment, or why not."""

    segment: SegmentFile | None
    problem: str = ""  # why it cannot be used, for the user ("": usable, or gone meanwhile)
    broken: bool = False  # this version's segment of this store, damaged: safe to delete


def read(path: Path, k: int, vocab: str) -> SegmentFile | None:
    """The segment in `path`, mapped read-only; None when it is not a whole, valid segment
    of this vocabulary and k-gram length (a torn, foreign or garbled file)."""
    return load(path, k, vocab).segment


def load(path: Path, k: int, vocab: str) -> Found:
    """The segment in `path`, or why it is not one. A non-regular file is never opened; a
    file removed meanwhile (a merge covered it) is no problem."""
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            return Found(None, f"is {fileio.file_kind(mode)}, not a segment file")
        # Checked again on the open fd: a FIFO or a link put here after the lstat is refused.
        f = fileread.open_regular(path, follow=False)
    except FileNotFoundError:
        return Found(None)
    except fileread.NotRegularFile as exc:
        return Found(None, f"is {exc.kind}, not a segment file")
    except fileio.FileIOError as exc:
        return Found(None, f"cannot be read now ({exc.reason})")
    except OSError as exc:
        return Found(None, f"cannot be read now ({fileio.describe(exc)})")
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size < 12:
                return Found(None, "is not a drafting store segment")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            why = fileio.describe(exc) if isinstance(exc, OSError) else str(exc)
            return Found(None, f"cannot be read now ({why})")
    return _parse(data, len(data), k, vocab, path.stem)


def _parse(data: mmap.mmap, size: int, k: int, vocab: str, name: str) -> Found:
    header = _header(data, size, k, vocab)
    if isinstance(header, Found):
        return header
    try:
        segment = _arrays(data, size, header[0], header[1], vocab, name)
    except Exception:  # noqa: BLE001 - a hostile header (Infinity, nesting): the same verdict
        segment = None
    if segment is None:
        return Found(None, "is damaged (its sizes do not add up)", broken=True)
    return Found(segment)


def _header(data: mmap.mmap, size: int, k: int,
            vocab: str) -> Found | tuple[dict[str, Any], int]:
    """The header of this version's segment of this store (and its length), or what the
    file is instead."""
    if data[:8] != MAGIC:
        return Found(None, "is not a drafting store segment")
    (length,) = struct.unpack("<I", data[8:12])
    if length > size - 12:  # a segment whose header runs past its end: torn
        return Found(None, "is damaged (cut short)", broken=True)
    try:
        if length > MAX_HEADER:
            raise ValueError(length)
        header = json.loads(bytes(data[12:12 + length]))
    except Exception:  # noqa: BLE001 - garbled bytes, bad UTF-8, nesting too deep
        header = None
    if not isinstance(header, dict):
        return Found(None, "has a header this version cannot read")
    if header.get("version") != VERSION:
        return Found(None, "is another version's segment")
    if header.get("k") != k or header.get("vocab") != vocab:
        return Found(None, "belongs to another vocabulary or k-gram length")
    return header, length


def _arrays(data: mmap.mmap, size: int, header: dict[str, Any], length: int, vocab: str,
            name: str) -> SegmentFile | None:
    counts = {key: int(header[key]) for key in ("tokens", "keys", "records")}
    covers = header.get("covers", [])
    if any(n < 0 for n in counts.values()) or not isinstance(covers, list) or \
            not all(isinstance(c, str) for c in covers):
        return None
    offset = 12 + length + (-(12 + length) % 8)
    arrays: dict[str, np.ndarray] = {}
    for name_, count_of, dtype in _LAYOUT:
        count = counts[count_of]
        nbytes = count * np.dtype(dtype).itemsize
        if offset + nbytes > size:
            return None
        arrays[name_] = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        offset += nbytes + (-nbytes % 8)
    if offset != size:
        return None
    segment = Segment(arrays["tokens"], arrays["keys"], arrays["positions"])
    records = Records(arrays["rec_start"], arrays["rec_length"], arrays["rec_time"],
                      arrays["rec_tag"])
    return SegmentFile(segment, records, tuple(covers), vocab, size, name)


def record_tokens(seg: SegmentFile, i: int) -> np.ndarray:
    """Record i's tokens, checked against the segment's bounds (hostile files)."""
    start, length = int(seg.records.start[i]), int(seg.records.length[i])
    tokens = seg.segment.tokens
    if start < 0 or length < 0 or start + length > len(tokens):
        return np.zeros(0, dtype=np.uint32)
    return np.asarray(tokens[start:start + length])
