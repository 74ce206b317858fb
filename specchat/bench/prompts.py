"""Benchmark prompts: Spec-Bench JSON Lines files and the built-in default set.

A line is `{"question_id": ..., "category": "...", "turns": ["first turn", ...]}`; only the
first turn is used, because a benchmark answer to a later turn would depend on the earlier
answer, which differs between modes whenever greedy outputs diverge. A line may also carry a
"schema" (a JSON schema): its answers are then constrained to JSON that matches it, as
`ask --schema` does. The built-in JSON set (`bench --json-schemas`) is such a file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specchat import fileio, fileread
from specchat.engine.options import Structure
from specchat.errors import UsageError
from specchat.llm.shapes import ShapeError, schema_text

BUILTIN_NAME = "default_prompts.jsonl"
JSON_NAME = "json_prompts.jsonl"  # the built-in set of schema-constrained prompts
FILE_LIMIT = 64 << 20  # a prompt file's bytes at most


@dataclass(frozen=True)
class BenchPrompt:
    """One benchmark question: where it came from and the text sent as the user turn."""

    question_id: str
    category: str
    text: str
    schema: str | None = None  # JSON text of a schema the answer must match

    def structure(self) -> Structure | None:
        return Structure("json_schema", self.schema) if self.schema is not None else None


def builtin_text(name: str = BUILTIN_NAME) -> str:
    """A shipped set: the default one (code editing, summarization, rag, writing, qa) or the
    JSON-schema one."""
    return resources.files("specchat.bench").joinpath(name).read_text(encoding="utf-8")


def read_input(path: Path, kind: str, *, flag: str = "", missing: str = "") -> str:
    """A bench input file's text, read with a bound; a missing or unreadable one is one
    usage line naming the file (and its `flag`) and what `kind` of file it should be."""
    label = f"{flag} " if flag else ""
    try:
        return fileread.read_text(path, FILE_LIMIT)
    except FileNotFoundError:
        hint = f"give {kind}, {missing}" if missing else kind
        raise UsageError(f"{label}{path}: no such file ({hint})") from None
    except fileio.FileIOError as exc:
        raise UsageError(f"{flag + ': ' if flag else ''}{exc}; give {kind}") from None


def load_prompts(path: Path | None, builtin: str = BUILTIN_NAME) -> list[BenchPrompt]:
    """Prompts of a JSONL file, or of the built-in set `builtin` when `path` is None."""
    if path is None:
        return parse_jsonl(builtin_text(builtin), source=f"<built-in {builtin}>")
    text = read_input(path, "a Spec-Bench style .jsonl file",
                      missing="or none for the built-in set")
    prompts = parse_jsonl(text, source=str(path))
    if not prompts:
        raise UsageError(f"{path}: no prompts in it")
    return prompts


def parse_jsonl(text: str, source: str) -> list[BenchPrompt]:
    """Parse every non-blank line; any bad line is a usage error naming file and line."""
    return [_parse_record(record, where)
            for where, record in json_lines(text, source, "question_id, category, turns")]


def json_lines(text: str, source: str, fields: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every non-blank line's JSON object and where it stands (`SOURCE:LINE`); a line that is
    no JSON object is a usage error naming the line and the `fields` it should hold."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(record, dict):
            raise UsageError(f"{where}: expected a JSON object with {fields}")
        yield where, record


def _parse_record(record: dict[str, Any], where: str) -> BenchPrompt:
    missing = [k for k in ("question_id", "category", "turns") if k not in record]
    if missing:
        raise UsageError(f"{where}: missing {', '.join(missing)}")
    qid, category, turns = record["question_id"], record["category"], record["turns"]
    if not isinstance(qid, (str, int)) or isinstance(qid, bool):
        raise UsageError(f"{where}: question_id must be a string or an integer")
    if not isinstance(category, str) or not category.strip():
        raise UsageError(f"{where}: category must be a non-empty string")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) \
            or not turns[0].strip():
        raise UsageError(f"{where}: turns must be a list whose first item is non-empty text")
    schema = record.get("schema")
    try:
        text = None if schema is None else schema_text(schema, "schema")
    except ShapeError as exc:
        raise UsageError(f"{where}: {exc.message}") from None
    return BenchPrompt(question_id=str(qid), category=category.strip(), text=turns[0],
                       schema=text)


def categories_of(prompts: Sequence[BenchPrompt]) -> list[str]:
    """Categories in the order they first appear in the file."""
    return list(dict.fromkeys(p.category for p in prompts))


def parse_categories(value: str | None) -> list[str] | None:
    """`a,b` -> ["a", "b"]; None or blank means every category."""
    if value is None or not value.strip():
        return None
    return [c.strip() for c in value.split(",") if c.strip()]


def select(prompts: Sequence[BenchPrompt], categories: Sequence[str] | None = None,
           limit: int | None = None) -> list[BenchPrompt]:
    """Keep the asked categories (file order kept) and at most `limit` prompts of each."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be >= 1 (got {limit})")
    known = categories_of(prompts)
    if categories:
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise UsageError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} "
                             f"{', '.join(unknown)}; this file has: {', '.join(known)}")
    wanted = set(categories) if categories else set(known)
    taken: dict[str, int] = {}
    chosen: list[BenchPrompt] = []
    for prompt in prompts:
        if prompt.category not in wanted:
            continue
        if limit is not None and taken.get(prompt.category, 0) >= limit:
            continue
        taken[prompt.category] = taken.get(prompt.category, 0) + 1
        chosen.append(prompt)
    return chosen
