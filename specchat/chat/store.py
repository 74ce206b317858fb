"""Conversations on disk: one JSON Lines file each, append-only, fsync'd per record.

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

from specchat.chat.conversation import Conversation
from specchat.errors import UsageError

FORMAT = "specchat-conversation"
VERSION = 1


def state_dir() -> Path:
    """$SPECCHAT_HOME/state, else $XDG_STATE_HOME/specchat, else ~/.local/state/specchat."""
    home = os.environ.get("SPECCHAT_HOME")
    if home:
        return Path(home).expanduser() / "state"
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "specchat"


def conversations_dir() -> Path:
    return state_dir() / "conversations"


def history_file() -> Path:
    """Where prompt-toolkit keeps the input history (the up-arrow lines)."""
    return state_dir() / "history"


def read_records(path: Path) -> list[dict[str, Any]]:
    """All complete records of a file; a torn or garbled line (a crash mid-write) is skipped."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no conversation file at {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    records: list[dict[str, Any]] = []
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(record, dict):
            records.append(record)
    if raw.strip() and not records:
        raise UsageError(f"{path} is not a specchat conversation (JSON Lines) file")
    return records


def load_conversation(path: Path) -> Conversation:
    return Conversation.from_records(read_records(path))


class Store:
    """The file one chat session appends to; created on the first record, not before.

    Creating it lazily keeps `history` free of empty conversations from sessions in which
    nothing was asked.
    """

    def __init__(self, path: Path | None = None, meta: dict[str, Any] | None = None) -> None:
        self.path = path or new_path()
        self.meta = meta or {}
        self._pending: list[dict[str, Any]] = []

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        created = not self.path.exists()
        if created or self.path.stat().st_size == 0:
            lines.append({"type": "meta", "format": FORMAT, "version": VERSION,
                          "created": _now(), **self.meta})
        lines += [*self._pending, {**record, "time": _now()}]
        self._pending = []
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
        # One write of whole lines, then fsync: the line is either there or (torn) skipped.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(self.path.parent)  # the new file's name must survive a crash too

    def seed(self, conversation: Conversation) -> None:
        """Start this file from an existing state (after /load or /clear).

        Written with the first new record, so loading a file and leaving adds no duplicate.
        """
        self._pending = conversation.to_records()


def new_path() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = conversations_dir()
    path = base / f"{stamp}.jsonl"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{n}.jsonl"
    return path


def conversation_files() -> list[Path]:
    """Saved conversations, most recently written first."""
    base = conversations_dir()
    if not base.is_dir():
        return []
    files = [p for p in base.glob("*.jsonl") if p.is_file()]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)


def latest_file() -> Path | None:
    files = conversation_files()
    return files[0] if files else None


def save_copy(conversation: Conversation, path: Path) -> None:
    """/save: a compact snapshot (JSON Lines), or a readable transcript when it ends in .md."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in (".md", ".markdown"):
        text = transcript(conversation)
    else:
        records = [{"type": "meta", "format": FORMAT, "version": VERSION, "created": _now()},
                   *conversation.to_records()]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # a reader never sees half a file


def transcript(conversation: Conversation) -> str:
    parts = []
    if conversation.system:
        parts.append(f"**System:** {conversation.system}\n")
    for turn in conversation.turns:
        mark = " *(interrupted)*" if turn.interrupted else ""
        parts.append(f"## You\n\n{turn.message}\n\n## Assistant{mark}\n\n{turn.assistant}\n")
    return "\n".join(parts)


@dataclass
class Summary:
    """One line of `specchat history`."""

    path: Path
    modified: float
    turns: int
    first: str
    model: str


def summaries(limit: int | None = None) -> Iterator[Summary]:
    for path in conversation_files()[:limit]:
        try:
            records = read_records(path)
        except UsageError:
            continue
        conv = Conversation.from_records(records)
        meta = next((r for r in records if r.get("type") == "meta"), {})
        first = conv.turns[0].user if conv.turns else ""
        yield Summary(path=path, modified=path.stat().st_mtime, turns=len(conv.turns),
                      first=" ".join(first.split()), model=str(meta.get("model", "")))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the data itself is synced
    finally:
        os.close(fd)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
