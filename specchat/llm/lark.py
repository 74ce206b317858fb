"""Grammar texts in llguidance's Lark dialect (llm/grammar.py compiles them): JSON, a JSON
schema, llama.cpp's GBNF converted, or Lark as given. Pure: importing it loads neither
llguidance nor llama.cpp (the GBNF converter loads when a GBNF grammar comes).
"""

from __future__ import annotations

import json
import re
from typing import Any

from specchat.engine.options import Structure
from specchat.errors import UsageError

# Whitespace a JSON answer may put between its tokens: what a model writes when it pretty-
# prints (a newline and some indentation), bounded so that a small model cannot pad an answer
# with whitespace forever.
JSON_WHITESPACE = r"[ \t\n]{0,20}"
JSON_OPTIONS: dict[str, Any] = {"whitespace_pattern": JSON_WHITESPACE}


class GrammarError(UsageError):
    """A schema or grammar that cannot be compiled; the message says what is wrong."""


def json_lark(schema: object, *, strict: bool = True) -> str:
    """A Lark rule body for JSON matching `schema` (True, or {}: any JSON value).

    strict False: keywords llguidance cannot enforce (uniqueItems, not, ...) are ignored
    instead of refused (llguidance's lenient mode); the answer may then break only those.
    """
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        raise GrammarError("a JSON schema must be a JSON object (or true)")
    options = dict(JSON_OPTIONS, lenient=not strict)
    return "%json " + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


def structure_lark(structure: Structure, *, strict: bool = True) -> str:
    """The whole Lark grammar for a Structure."""
    json_rule = json_body(structure, strict=strict)
    if json_rule is not None:
        return "start: " + json_rule
    text = structure.text
    if "::=" in text:  # llama.cpp's GBNF
        from llguidance.gbnf_to_lark import any_to_lark  # only for GBNF

        try:
            return str(any_to_lark(text))
        except Exception as exc:  # noqa: BLE001 - the converter raises plain exceptions
            raise GrammarError(f"the GBNF grammar does not convert: {one_line(exc)}") from None
    return text


def json_body(structure: Structure, *, strict: bool = True) -> str | None:
    """The Lark rule body of a JSON Structure (None for a grammar, which is whole)."""
    if structure.kind == "json":
        return json_lark({"type": "object"})
    if structure.kind == "json_schema":
        return json_lark(parse_schema(structure.text), strict=strict)
    return None


def parse_schema(text: str) -> object:
    """A JSON schema from its text; GrammarError naming the problem."""
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise GrammarError(f"the JSON schema is not valid JSON ({exc})") from None
    except RecursionError:
        raise GrammarError("the JSON schema nests too deeply to be read") from None
    if not isinstance(schema, (dict, bool)):
        raise GrammarError("a JSON schema must be a JSON object (or true)")
    return schema


def one_line(exc: object) -> str:
    """llguidance's message as one short line: without the parser state, the grammar text
    and the source line it appends, which are its internals, not the user's problem."""
    text = re.sub(r"\s+", " ", str(exc)).strip()
    text = re.split(r" ?<state>| ?<grammar>| \d+ \| ", text, maxsplit=1)[0]
    text = re.sub(r"^at \d+\(\d+\): (?=failed to compile JSON schema)", "", text)
    return text if len(text) <= 200 else text[:199] + "…"
