"""The `format` and `schema` options (flags, config file, /set) as the engine's Structure
(what an answer must be), and back for /show; a schema file is read bounded (fileio)."""

from __future__ import annotations

from pathlib import Path

from specchat import fileio, fileread
from specchat.engine.options import Structure
from specchat.errors import UsageError
from specchat.llm.lark import parse_schema
from specchat.llm.shapes import ShapeError, checked

FORMATS = ("text", "json")
SCHEMA_FILE_LIMIT = 8 << 20  # as much as a server takes in one request body


def structure_from_options(format: str, schema: str | None) -> Structure | None:
    """A schema (JSON text, or the path of a file holding it) makes a JSON answer that must
    validate against it; format json any JSON object; text, free text (None).

    Schema keywords the grammar cannot enforce are ignored rather than refused (strict
    False): `specchat ask --schema` validates the whole answer afterwards anyway.
    """
    if schema:
        return Structure("json_schema", load_schema(schema), strict=False)
    return Structure("json") if format == "json" else None


def load_schema(value: str) -> str:
    """The schema's JSON text from the option's value; UsageError saying what is wrong."""
    text = value.strip()
    if not text.startswith("{") and text not in ("true", "false"):
        path = Path(text).expanduser()
        try:
            text = fileread.read_limited(path, SCHEMA_FILE_LIMIT).decode("utf-8")
        except (OSError, UnicodeDecodeError, fileio.FileIOError) as exc:
            why = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
            raise UsageError(f"schema {value!r}: cannot read it ({why}); give a file or the "
                             "schema itself as JSON") from None
    try:
        checked(parse_schema(text), "the schema")
    except (UsageError, ShapeError) as exc:
        label = value if len(value) <= 60 else value[:59] + "…"  # an inline schema is long
        raise UsageError(f"schema {label!r}: {exc}") from None
    return text


def format_values(structure: Structure | None) -> tuple[str, str | None]:
    """(format, schema) option values for a structure (a grammar shows as text)."""
    if structure is None or structure.kind == "grammar":
        return "text", None
    return "json", structure.text if structure.kind == "json_schema" else None
