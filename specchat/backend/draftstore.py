"""The drafting store: earlier prompts and answers, kept on disk for `auto` to draft from.

It holds the user's words, so it is kept like conversations: in the state directory
(paths.draft_store_dir), 0700 directories and 0600 files, written only through fileio.py.
One directory per vocabulary (vocab_key), since token ids mean text only within one.

Every answer is written as a new immutable segment file (storefile.py) with a unique name,
atomically: several processes (two shells and a server) write at once without ever touching
the same file, and a crash leaves at most the answer being written unwritten. Readers never
lock: they map every segment file and ignore those another file says it replaces ("covers").
One process at a time (an flock, never waited for after an answer) keeps the store small and
fast: it deletes what is covered, merges segments of a size (four of a size tier become one,
so there are only a few dozen files at most), and evicts the oldest records once the store
is over its size limit. `history rm` waits for the lock and rewrites the segments that hold
the deleted conversation's answers without them (forget); `history store --clear` waits for it
too, so no merge can write back what it deletes.

The files are not trusted: one that cannot be used (not a regular file, not readable now,
another version's, garbled) is skipped, and named once in a note on stderr. Only what is
provably this store's and broken (storefile.Found.broken), covered, or a temporary file a
dead writer left is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from specchat import fileio
from specchat.backend.storefile import Found, SegmentFile, build, encode, load, record_tokens
from specchat.engine.protocol import common_prefix
from specchat.engine.suffix import KEY_LEN, SuffixIndex
from specchat.term.safe import note

SUFFIX = ".seg"
LOCK = ".lock"
TIER_BASE = 512  # tokens: segments below this are tier 0
FANOUT = 4  # this many segments of one tier merge into one of the next
MAX_SEGMENTS = 40  # beyond this, everything merges (a lookup searches every segment)
STALE_TEMP = 600.0  # seconds after which a temporary file is a crash's leftover
EVICT_TO = 0.9  # eviction brings the store down to this share of its limit
MAX_PROMPT = 2048  # prompt tokens kept per record at most (the end of the prompt)
SAMPLE_TOKENS = 512  # token pieces that fingerprint a vocabulary
# What fileio.atomic_write names its temporary files: the only temporary files deleted here.
_TEMP = re.compile(r"\..+\.\d+\.[0-9a-f]+\.tmp")
_TOLD: set[Path] = set()  # files this process named in a note already (one note each)


def vocab_key(n_vocab: int, eog: frozenset[int], token_bytes: Callable[[int], bytes]) -> str:
    """A short name for a vocabulary: its size, its end tokens and a spread of token pieces
    (a few milliseconds; reading every token would take a fifth of a second)."""
    h = hashlib.sha256(f"{n_vocab}|{sorted(eog)}".encode())
    step = max(1, n_vocab // SAMPLE_TOKENS)
    for token in [*range(0, n_vocab, step), *range(max(0, n_vocab - 64), n_vocab)]:
        h.update(token_bytes(token) + b"\0")
    return h.hexdigest()[:16]


def tag_of(answer: str) -> int:
    """What names a record for deletion: its answer's text (a conversation's turns keep the
    same text, so `history rm` finds them; equal answers elsewhere go with them)."""
    return int.from_bytes(hashlib.sha256(answer.encode("utf-8")).digest()[:8], "little")


def record_start(chat_tokens: Callable[[list[dict[str, str]]], list[int]],
                 messages: Sequence[dict[str, str]], prompt: Sequence[int]) -> int:
    """Where the part of a chat prompt worth keeping starts: after what the messages before
    the last one render to (a system prompt, earlier turns: stored before, or repeated in
    every request), and at most MAX_PROMPT tokens before the end."""
    cut = 0
    if len(messages) > 1:
        try:
            cut = common_prefix(chat_tokens(list(messages[:-1])), prompt)
        except Exception:  # noqa: BLE001 - a template that cannot render a part: keep it all
            cut = 0
    return max(cut, len(prompt) - MAX_PROMPT, 0)


class DraftStore:
    """One vocabulary's segments in `root/vocab`; `limit` bytes at most (0: keep nothing)."""

    def __init__(self, root: Path, vocab: str, limit: int, *, writable: bool = True,
                 k: int = KEY_LEN, clock: Callable[[], float] = time.time,
                 warn: Callable[[str], None] = note) -> None:
        self.root = root
        self.directory = root / vocab
        self.vocab = vocab
        self.limit = limit
        self.writable = writable and limit > 0
        self.k = k
        self.clock = clock
        self._loaded: list[SegmentFile] = []
        self._stamp: tuple[int, int] | None = None  # the directory's mtime when loaded
        self.warn = warn

    # --- reading ---------------------------------------------------------------------------
    def segments(self) -> list[SegmentFile]:
        """The live segments, oldest newest-record first; reread when the directory changed."""
        stamp = self._dir_stamp()
        if stamp != self._stamp:
            self._loaded = self._read_all()
            self._stamp = stamp
        return self._loaded

    def index(self, n_vocab: int) -> SuffixIndex:
        return SuffixIndex([s.segment for s in self.segments()], n_vocab, self.k)

    def _dir_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.directory.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_ino

    def _read_all(self) -> list[SegmentFile]:
        segs = [f.segment for f in self._found().values() if f.segment is not None]
        covered = {name for s in segs for name in s.covers}
        return sorted((s for s in segs if s.name not in covered), key=lambda s: s.newest)

    def _found(self) -> dict[Path, Found]:
        """Every file named like a segment, read; those that cannot be used are named in a
        note, each once in this process's life."""
        found = {p: load(p, self.k, self.vocab) for p in self._files()}
        bad = [(p.name, f.problem) for p, f in found.items() if f.problem and p not in _TOLD]
        if bad:
            _TOLD.update(p for p, f in found.items() if f.problem)
            more = f"; and {len(bad) - 1} more" if len(bad) > 1 else ""
            self.warn(f"specchat: note: the drafting store skipped {len(bad)} file"
                      f"{'s' if len(bad) > 1 else ''} in {self.directory} ({bad[0][0]} "
                      f"{bad[0][1]}{more}); remove what is not yours, or clear the store "
                      "with `specchat history store --clear`")
        return found

    def _files(self) -> list[Path]:
        try:
            return sorted(p for p in self.directory.iterdir()
                          if p.suffix == SUFFIX and not p.name.startswith("."))
        except OSError:
            return []

    def usage(self) -> tuple[int, int, int]:
        """(segment files, bytes, records) of this vocabulary's store now."""
        segs = self.segments()
        return len(segs), sum(s.size for s in segs), sum(len(s.records) for s in segs)

    # --- writing ---------------------------------------------------------------------------
    def append(self, tokens: Sequence[int], tag: int) -> None:
        """Keep one record (prompt part + answer) as a segment of its own, then tidy up if
        no other process is doing so. Raises FileIOError when it cannot be written."""
        if not self.writable or not tokens:
            return
        seg = build([(np.asarray(tokens, dtype=np.uint32), self.clock(), tag)], self.vocab,
                    self.k)
        self._write(seg)
        try:
            with self._lock(wait=False) as held:
                if held:
                    self._maintain()
        except fileio.FileIOError as exc:  # the record is kept; only tidying waits
            self.warn(f"specchat: note: the drafting store was not tidied: {exc}")

    def forget(self, tags: set[int]) -> int:
        """Remove every record with one of these tags (waits for the lock); how many went."""
        if not tags or not self.directory.is_dir():
            return 0
        removed = 0
        with self._lock(wait=True):
            for seg in self._read_all():
                gone = np.isin(seg.records.tag, np.fromiter(tags, dtype=np.uint64))
                if gone.any():
                    removed += int(gone.sum())
                    self._rewrite([seg], keep=~gone)
        return removed

    def _write(self, seg: SegmentFile) -> None:
        name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
        fileio.make_dirs(self.directory, private=True)
        fileio.atomic_write(self.directory / name, encode(seg, self.k), overwrite=False)

    def _rewrite(self, sources: list[SegmentFile], keep: np.ndarray | None = None) -> None:
        """Replace `sources` by one segment of their records (only those `keep` marks, in
        order, when given), then delete them: readers in between ignore what is covered."""
        records = [(record_tokens(s, i), float(s.records.time[i]), int(s.records.tag[i]))
                   for s in sources for i in range(len(s.records))]
        if keep is not None:
            records = [r for r, k in zip(records, keep, strict=True) if k]
        records.sort(key=lambda r: r[1])
        if records:
            self._write(build(records, self.vocab, self.k, tuple(s.name for s in sources)))
        for s in sources:
            with contextlib.suppress(OSError):
                (self.directory / f"{s.name}{SUFFIX}").unlink()

    # --- keeping it small (one process at a time) ---------------------------------------
    @contextlib.contextmanager
    def _lock(self, wait: bool) -> Iterator[bool]:
        with fileio.locked(self.directory / LOCK, wait=wait) as held:
            yield held

    def _maintain(self) -> None:
        self._tidy()
        segs = self._read_all()
        while True:
            group = _mergeable(segs)
            if not group:
                break
            self._rewrite(group)
            segs = self._read_all()
        self._evict(segs)

    def _tidy(self) -> None:
        """Delete what a crash left: covered segments, old temporary files, and segments of
        this store that are broken. Nothing else: a file that cannot be read now, or that
        another version wrote, stays."""
        found = self._found()
        covered = {n for f in found.values() if f.segment for n in f.segment.covers}
        # Only what was listed above: another writer may have added a segment since.
        doomed = [p for p, f in found.items() if f.broken or (f.segment and p.stem in covered)]
        now = time.time()
        with contextlib.suppress(OSError):
            doomed += [p for p in self.directory.iterdir()
                       if _TEMP.fullmatch(p.name) and now - _mtime(p) > STALE_TEMP]
        for path in doomed:
            with contextlib.suppress(OSError):
                path.unlink()

    def _evict(self, segs: list[SegmentFile]) -> None:
        """Drop the oldest records, whichever segments hold them, until the store is below
        EVICT_TO of its limit (a record costs its share of its segment's bytes)."""
        total = sum(s.size for s in segs)
        if total <= self.limit or not segs:
            return
        times = np.concatenate([s.records.time for s in segs])
        cost = np.concatenate([s.records.length.astype(np.float64) + 1 for s in segs]) * \
            np.concatenate([np.full(len(s.records), s.size / max(len(s.segment), 1))
                            for s in segs])
        order = np.argsort(times, kind="stable")
        freed = np.cumsum(cost[order])
        drop = order[: int(np.searchsorted(freed, total - self.limit * EVICT_TO)) + 1]
        gone = np.zeros(len(times), dtype=bool)
        gone[drop] = True
        start = 0
        for seg in segs:
            mine = gone[start: start + len(seg.records)]
            start += len(seg.records)
            if mine.any():
                self._rewrite([seg], keep=~mine)


def _tier(seg: SegmentFile) -> int:
    return max(0, int(math.log(max(len(seg.segment.tokens), 1) / TIER_BASE, FANOUT)) + 1) \
        if len(seg.segment.tokens) >= TIER_BASE else 0


def _mergeable(segs: list[SegmentFile]) -> list[SegmentFile]:
    """FANOUT segments of the lowest tier that has that many; all when there are too many."""
    if len(segs) > MAX_SEGMENTS:
        return segs
    tiers: dict[int, list[SegmentFile]] = {}
    for s in segs:
        tiers.setdefault(_tier(s), []).append(s)
    for tier in sorted(tiers):
        if len(tiers[tier]) >= FANOUT:
            return tiers[tier]
    return []


def _mtime(path: Path) -> float:
    """When a regular file was last written (now for anything else: never stale)."""
    try:
        st = path.lstat()
    except OSError:
        return time.time()
    return st.st_mtime if stat.S_ISREG(st.st_mode) else time.time()


def open_store(n_vocab: int, eog: frozenset[int], token_bytes: Callable[[int], bytes], *,
               enabled: bool, size: str, private: bool,
               root: Path | None = None) -> DraftStore | None:
    """This vocabulary's store as the options say: None when drafting from it is off or
    nothing may be kept; read-only in private mode."""
    from specchat.paths import draft_store_dir
    from specchat.settings.schema import parse_size

    limit = parse_size(size)
    if not enabled or limit <= 0:
        return None
    return DraftStore(root or draft_store_dir(), vocab_key(n_vocab, eog, token_bytes), limit,
                      writable=not private)


def forget_everywhere(tags: set[int], root: Path | None = None) -> int:
    """Remove the records with these tags from every vocabulary's store (`history rm`)."""
    from specchat.paths import draft_store_dir

    base = root or draft_store_dir()
    if not tags:
        return 0
    return sum(DraftStore(base, d.name, 1).forget(tags) for d in _folders(base))


def usage_by_vocabulary(root: Path | None = None) -> dict[str, tuple[int, int, int]]:
    """(segment files, bytes, records) of every vocabulary's store under `root` that holds
    any (a cleared one keeps only its lock file)."""
    from specchat.paths import draft_store_dir

    usage = {d.name: DraftStore(d.parent, d.name, 1).usage()
             for d in _folders(root or draft_store_dir())}
    return {vocab: used for vocab, used in usage.items() if used[0]}


def clear(root: Path | None = None) -> int:
    """Delete every store under `root` (only the files a store consists of); how many
    records went. Each vocabulary's lock is held meanwhile, so a merge running in another
    process either finished before or starts after, never writes back what went."""
    from specchat.paths import draft_store_dir

    gone = 0
    for folder in _folders(root or draft_store_dir()):
        store = DraftStore(folder.parent, folder.name, 1)
        with store._lock(wait=True):
            gone += store.usage()[2]
            for path in _listing(folder):
                if (path.suffix == SUFFIX or _TEMP.fullmatch(path.name)) and _regular(path):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
    return gone


def _folders(base: Path) -> list[Path]:
    """The vocabulary folders under `base` (real folders: a link is not followed)."""
    return [d for d in _listing(base) if stat.S_ISDIR(_lstat_mode(d))]


def _listing(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _regular(path: Path) -> bool:
    return stat.S_ISREG(_lstat_mode(path))


def _lstat_mode(path: Path) -> int:
    try:
        return path.lstat().st_mode
    except OSError:
        return 0
