"""Chat logs: each conversation on disk as one JSON Lines file, append-only, fsync'd per record.

Appending one small line and fsyncing it is the whole crash story: a kill -9 can lose only
the answer still being generated, and at worst leaves a torn last line, which reading skips.
Undo, clear and system-prompt changes are records too, so the file is a log that replays to
the current state and nothing is ever rewritten in place.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat import fileio, fileread
from specchat.chat.conversation import Conversation
from specchat.errors import UsageError
from specchat.paths import conversations_dir
from specchat.term.safe import note

FORMAT = "specchat-conversation"
VERSION = 1
CONVERSATION_LIMIT = 1 << 30  # files of 16 MiB attachments add up; /dev/zero does not get in
FIRST_LINE_LIMIT = 1 << 16  # the meta record that starts a conversation file is short


def read_records(path: Path) -> list[dict[str, Any]]:
    """All complete records of a file; a torn or garbled line (a crash mid-write) is skipped
    and named on stderr, so a damaged file is noticed without losing the rest of it."""
    try:
        raw = fileread.read_limited(path, CONVERSATION_LIMIT)
    except FileNotFoundError:
        raise UsageError(f"no conversation file at {path}") from None
    except fileio.FileIOError as exc:
        raise UsageError(f"{exc}; give a conversation file (`specchat history` lists the "
                         "saved ones)") from None
    records: list[dict[str, Any]] = []
    skipped: list[int] = []
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped.append(number)
    if raw.strip() and not records:
        raise UsageError(f"{path} is not a specchat conversation (JSON Lines) file")
    if skipped:
        where = ", ".join(str(n) for n in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        note(f"specchat: note: {path}: skipped {len(skipped)} damaged line"
             f"{'s' if len(skipped) > 1 else ''} (line {where}; a crash mid-write?)")
    return records


def load_conversation(path: Path) -> Conversation:
    return Conversation.from_records(read_records(path))


class ChatLog:
    """The file one chat session appends to; created with its first record, not before.

    Creating it lazily keeps `history` free of empty conversations from sessions in which
    nothing was asked; creating it exclusively (fileio.create_unique) keeps two sessions
    started in the same second apart. Records that could not be written (a full disk) stay
    pending and go with the next append that succeeds.
    """

    def __init__(self, path: Path | None = None, meta: dict[str, Any] | None = None) -> None:
        self.path = path
        self.meta = meta or {}
        self._pending: list[dict[str, Any]] = []

    @property
    def started(self) -> bool:
        """Whether this session's file holds at least one record."""
        return self.path is not None and has_records(self.path)

    def append(self, record: dict[str, Any]) -> None:
        """Write `record` (and any pending ones) durably, or raise FileIOError and keep them."""
        self._pending.append({**record, "time": _now()})
        if self.path is None:
            self.path = fileio.create_unique(conversations_dir(),
                                              time.strftime("%Y%m%d-%H%M%S"), ".jsonl")
        lines = list(self._pending)
        if not has_records(self.path):
            lines.insert(0, {"type": "meta", "format": FORMAT, "version": VERSION,
                             "created": _now(), **self.meta})
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
        fileio.append_bytes(self.path, data.encode("utf-8"))
        self._pending = []

    def problem(self) -> str | None:
        """Why records cannot be written now (a read-only state directory), or None."""
        try:
            directory = self.path.parent if self.path is not None else \
                fileio.make_dirs(conversations_dir())
        except fileio.FileIOError as exc:
            return str(exc)
        if not os.access(directory, os.W_OK):
            return f"cannot write in {directory} (read-only, or not yours)"
        return None

    def seed(self, conversation: Conversation) -> None:
        """Start this file from an existing state (after /load or /clear).

        Written with the first new record, so loading a file and leaving adds no duplicate.
        """
        self._pending = conversation.to_records()


class PrivateChatLog(ChatLog):
    """--private: the conversation stays in memory only; nothing is ever written."""

    def append(self, record: dict[str, Any]) -> None:
        return None


def has_records(path: Path) -> bool:
    """True when `path` holds at least one complete record (a 0-byte file holds none)."""
    try:  # never opened blocking: a FIFO under a conversation's name is no conversation
        first = fileread.read_head(path, FIRST_LINE_LIMIT).split(b"\n", 1)[0]
    except (OSError, fileio.FileIOError):
        return False
    try:
        return isinstance(json.loads(first), dict)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def conversation_files() -> list[Path]:
    """Saved conversations, most recently written first; files without a complete record
    (created but never written, or emptied by a full disk) are not conversations."""
    base = conversations_dir()
    if not base.is_dir():
        return []
    files = [p for p in base.glob("*.jsonl") if p.is_file() and has_records(p)]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)


def latest_file() -> Path | None:
    files = conversation_files()
    return files[0] if files else None


def save_copy(conversation: Conversation, path: Path, *, overwrite: bool = False) -> None:
    """/save: a compact snapshot (JSON Lines), or a readable transcript when it ends in .md.

    Private and atomic; an existing file is replaced only with overwrite=True (/save!).
    """
    if path.suffix.lower() in (".md", ".markdown"):
        text = transcript(conversation)
    else:
        records = [{"type": "meta", "format": FORMAT, "version": VERSION, "created": _now()},
                   *conversation.to_records()]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    try:
        fileio.atomic_write(path, text, overwrite=overwrite)
    except FileExistsError:
        raise UsageError(f"{path} exists: /save! {path} replaces it, or pick another "
                         "name") from None


def transcript(conversation: Conversation) -> str:
    parts = []
    if conversation.system:
        parts.append(f"**System:** {conversation.system}\n")
    for turn in conversation.turns:
        mark = " *(interrupted)*" if turn.interrupted else ""
        parts.append(f"## You\n\n{turn.message}\n\n## Assistant{mark}\n\n{turn.assistant}\n")
    return "\n".join(parts)


@dataclass
class ConversationSummary:
    """One line of `specchat history`."""

    path: Path
    modified: float
    turns: int
    first: str
    model: str


def conversation_summaries(limit: int | None = None) -> Iterator[ConversationSummary]:
    for path in conversation_files()[:limit]:
        try:
            records = read_records(path)
        except UsageError:
            continue
        conv = Conversation.from_records(records)
        meta = next((r for r in records if r.get("type") == "meta"), {})
        first = conv.turns[0].user if conv.turns else ""
        yield ConversationSummary(path=path, modified=path.stat().st_mtime,
                                  turns=len(conv.turns), first=" ".join(first.split()),
                                  model=str(meta.get("model", "")))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
