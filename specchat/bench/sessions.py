"""Sessions for `bench --sessions`: sequences of related requests, answered in order.

A session file is JSON Lines. A line is either a whole session:

    {"session": "sql-shop", "category": "sql", "system": "optional", "requests": ["...", ...]}

or one request of a session, the requests of a session in file order:

    {"session": "sql-shop", "category": "sql", "prompt": "..."}   ("turns": ["..."] works too)

A session may also shape every answer as an agent's calls do: "schema" (a JSON schema the
answer must match, as `ask --schema` and a server's response_format), or "tools" (OpenAI
function tools, with an optional "tool_choice"; sent through `serve` only, since `ask` takes
no tools). Given on several lines of one session, they must agree.

Each request is a fresh one-shot question (the system prompt, if any, then the request),
not a turn of one conversation: that is what a shell loop or an agent calling a server
sends. The built-in set (default_sessions.jsonl) has conversions, tool calls, SQL over one
schema, docstrings, tests and endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from specchat.bench.prompts import json_lines, read_input
from specchat.errors import UsageError
from specchat.llm.shapes import ShapeError, schema_text, toolset_of

BUILTIN_SESSIONS = "default_sessions.jsonl"


@dataclass
class Session:
    name: str
    category: str
    system: str | None = None
    requests: list[str] = field(default_factory=list)
    schema: str | None = None  # JSON text of the schema every answer must match
    tools: list[dict[str, Any]] | None = None  # OpenAI function tools, checked
    tool_choice: Any = None

    def messages(self, request: str) -> list[dict[str, str]]:
        out = [{"role": "system", "content": self.system}] if self.system else []
        return [*out, {"role": "user", "content": request}]


def load_sessions(path: Path | None) -> list[Session]:
    """The sessions of a file, or the built-in set; a bad file is one usage error naming
    the line."""
    if path is None:
        text = resources.files("specchat.bench").joinpath(BUILTIN_SESSIONS).read_text(
            encoding="utf-8")
        return parse_sessions(text, f"<built-in {BUILTIN_SESSIONS}>")
    text = read_input(path, "a JSON Lines file, one session or one request per line",
                      flag="--sessions")
    sessions = parse_sessions(text, str(path))
    if not sessions:
        raise UsageError(f"--sessions {path}: no sessions in it")
    return sessions


def parse_sessions(text: str, source: str) -> list[Session]:
    found: dict[str, Session] = {}
    for where, record in json_lines(text, source, "session and requests"):
        if "session" not in record:
            raise UsageError(f'{where}: no "session": a session file has lines like '
                             '{"session": "sql", "requests": ["...", "..."]} (a Spec-Bench '
                             "file goes without --sessions)")
        name = _text(record, "session", where)
        session = found.setdefault(name, Session(name, _category(record, name, where),
                                                 _system(record, where)))
        _shape(session, record, where)
        session.requests.extend(_requests(record, where))
    return list(found.values())


def _shape(session: Session, record: dict[str, Any], where: str) -> None:
    """The session's schema and tools from this line, checked as a server checks them."""
    given: dict[str, Any] = {}
    try:
        if record.get("schema") is not None:
            given["schema"] = schema_text(record["schema"], "schema")
        if record.get("tools") or record.get("tool_choice") is not None:
            toolset_of(record.get("tools"), record.get("tool_choice"), None)
            given.update((k, record[k]) for k in ("tools", "tool_choice") if k in record)
    except ShapeError as exc:
        raise UsageError(f"{where}: {exc.message}") from None
    for key, value in given.items():
        if getattr(session, key) not in (None, value):
            raise UsageError(f"{where}: {key} differs from what an earlier line of session "
                             f"{session.name!r} gave")
        setattr(session, key, value)
    if session.schema is not None and session.tools:
        raise UsageError(f"{where}: give a session a schema or tools, not both")


def _text(record: dict[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: {key} must be a non-empty string")
    return value.strip()


def _category(record: dict[str, Any], name: str, where: str) -> str:
    return _text(record, "category", where) if "category" in record else name


def _system(record: dict[str, Any], where: str) -> str | None:
    system = record.get("system")
    if system is not None and not isinstance(system, str):
        raise UsageError(f"{where}: system must be a string")
    return system or None


def _requests(record: dict[str, Any], where: str) -> list[str]:
    if "requests" in record:
        items = record["requests"]
    elif "turns" in record:
        items = record["turns"][:1] if isinstance(record["turns"], list) else None
    elif "prompt" in record:
        items = [record["prompt"]]
    else:
        raise UsageError(f"{where}: give requests (a list), prompt or turns")
    if not isinstance(items, list) or not items or not all(
            isinstance(i, str) and i.strip() for i in items):
        raise UsageError(f"{where}: requests must be a non-empty list of non-empty strings")
    return list(items)
