"""Saved conversations by ID: finding, searching and exporting them (`specchat history`).

A conversation's ID is its file name without `.jsonl`; any unique prefix of it names it too,
and `last` is the most recently written one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.chat.chatlog import conversation_files, read_records, transcript
from specchat.chat.conversation import Conversation
from specchat.errors import UsageError

LAST = "last"


def find(ident: str) -> Path:
    """The file `ident` names: `last`, a whole ID, or a unique prefix of one."""
    files = conversation_files()
    if not files:
        raise UsageError("no saved conversations yet")
    if ident.lower() == LAST:
        return files[0]
    ident = ident.removesuffix(".jsonl")
    exact = [p for p in files if p.stem == ident]
    if exact:
        return exact[0]
    matches = [p for p in files if p.stem.startswith(ident)] if ident else []
    if not matches:
        raise UsageError(f"no conversation {ident!r} (`specchat history` lists the IDs)")
    if len(matches) > 1:
        shown = ", ".join(p.stem for p in matches[:4]) + (", ..." if len(matches) > 4 else "")
        raise UsageError(f"{ident!r} matches {len(matches)} conversations ({shown}): "
                         "give more of the ID")
    return matches[0]


def load(path: Path) -> tuple[Conversation, dict[str, Any]]:
    """The conversation and its meta record (model, draft, when it was created)."""
    records = read_records(path)
    meta = next((r for r in records if r.get("type") == "meta"), {})
    return Conversation.from_records(records), meta


@dataclass(frozen=True)
class Match:
    path: Path
    turn: int  # 1-based
    who: str  # "you", "file NAME" or "assistant"
    line: str


def search(text: str) -> Iterator[Match]:
    """Lines containing `text` (any case), newest conversation first, in turn order within."""
    needle = text.casefold()
    for path in conversation_files():
        try:
            conversation, _ = load(path)
        except UsageError:
            continue  # an unreadable file is skipped, as `history` does
        for number, turn in enumerate(conversation.turns, 1):
            sources = [("you", turn.user)]
            sources += [(f"file {a.name}", a.text) for a in turn.attachments]
            sources.append(("assistant", turn.assistant))
            for who, body in sources:
                for line in body.splitlines():
                    if needle in line.casefold():
                        yield Match(path, number, who, line.strip())


def to_markdown(path: Path) -> str:
    conversation, meta = load(path)
    head = [f"# {path.stem}", ""]
    model = meta.get("model")
    if model:
        draft = meta.get("draft")
        head += [f"*model: {model}" + (f", draft: {draft}" if draft else "") + "*", ""]
    return "\n".join(head) + "\n" + transcript(conversation)


def to_json(path: Path) -> str:
    conversation, meta = load(path)
    data = {"id": path.stem, "meta": meta, "system": conversation.system,
            "turns": [t.to_dict() for t in conversation.turns]}
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def excerpt(line: str, text: str, width: int = 100) -> str:
    """The part of `line` around `text`, at most `width` characters."""
    if len(line) <= width:
        return line
    at = max(line.casefold().find(text.casefold()), 0)
    start = max(0, min(at - width // 3, len(line) - width))
    cut = line[start:start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(line) else "")
