"""The fields of a request that shape an answer beyond sampling, checked: a response_format
(and llama-server's `json_schema` and `grammar`) as a Structure, and `tools` / `tool_choice` /
`parallel_tool_calls` as a ToolSet. Every error names the field to change (`param`): the
server answers it as a 400, `bench --sessions` as a usage error naming the line."""

from __future__ import annotations

import json
from typing import Any

from specchat.engine.options import Structure
from specchat.llm.tools import CHOICES, NAME, Tool, ToolSet


class ShapeError(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def response_structure(response_format: Any, json_schema: Any = None,
                       grammar: Any = None) -> Structure | None:
    """What the answer must be; None for free text."""
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise ShapeError("grammar must be a GBNF or Lark grammar as a string",
                             param="grammar")
        return Structure("grammar", grammar)
    if json_schema is not None:  # llama-server's shorthand
        return Structure("json_schema", schema_text(json_schema, "json_schema"))
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ShapeError("response_format must be an object like {\"type\": \"json_object\"}",
                         param="response_format")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")  # llama-server accepts a schema here too
        if schema is None:
            return Structure("json")
        return Structure("json_schema", schema_text(schema, "response_format.schema"))
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise ShapeError("response_format.json_schema needs a \"schema\" object (and a "
                             "\"name\")", param="response_format.json_schema")
        strict = spec.get("strict")
        return Structure("json_schema", schema_text(spec["schema"],
                                                     "response_format.json_schema.schema"),
                         strict=strict is not False)
    raise ShapeError(f"response_format.type {kind!r} is not supported: use text, "
                     "json_object or json_schema", param="response_format.type")


def schema_text(schema: Any, param: str) -> str:
    """A JSON schema (an object, or true/false) as the text a Structure holds."""
    if not isinstance(schema, (dict, bool)):
        raise ShapeError(f"{param} must be a JSON schema object", param=param)
    checked(schema, param)
    return json.dumps(schema, ensure_ascii=False)


def checked(schema: Any, param: str) -> None:
    """ShapeError unless `schema` passes llm/schemacheck (only its own references, RE2
    patterns, bounded nesting): refused before any answer, never found out during one."""
    from specchat.llm.schemacheck import SchemaProblem, check  # jsonschema: only when asked

    try:
        check(schema)
    except SchemaProblem as exc:
        where = f" at {exc.where}" if exc.where else ""
        raise ShapeError(f"{param}{where}: {exc.message}", param=param) from None


def toolset_of(tools: Any, choice: Any, parallel: Any) -> ToolSet | None:
    """The request's tools and how they may be used; None when it has none."""
    if not tools:
        if choice not in (None, "none", "auto"):
            raise ShapeError("tool_choice asks for a tool call, but the request has no "
                             "tools", param="tool_choice")
        return None
    if not isinstance(tools, list):
        raise ShapeError("tools must be a list of {\"type\": \"function\", ...}",
                         param="tools")
    parsed = tuple(_tool(tool, i) for i, tool in enumerate(tools))
    names = [t.name for t in parsed]
    if len(set(names)) != len(names):
        raise ShapeError("tools names the same function twice", param="tools")
    chosen = _choice(choice, names)
    return ToolSet(parsed, chosen, parallel is not False)


def _tool(tool: Any, i: int) -> Tool:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise ShapeError(f"{where}.type {kind!r} is not supported: only function tools",
                         param=f"{where}.type")
    function = tool.get("function")
    if not isinstance(function, dict):
        raise ShapeError(f"{where}.function must be an object", param=f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ShapeError(f"{where}.function.name must be 1-64 letters, digits, _ . : or -",
                         param=f"{where}.function.name")
    params = function.get("parameters") or {"type": "object"}
    if not isinstance(params, dict):
        raise ShapeError(f"{where}.function.parameters must be a JSON schema object",
                         param=f"{where}.function.parameters")
    checked(params, f"{where}.function.parameters")
    description = function.get("description") or ""
    if not isinstance(description, str):
        raise ShapeError(f"{where}.function.description must be a string",
                         param=f"{where}.function.description")
    return Tool(name, description, params, strict=function.get("strict") is True)


def _choice(choice: Any, names: list[str]) -> str:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise ShapeError(f"tool_choice {choice!r}: use auto, none, required or "
                             "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                             param="tool_choice")
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise ShapeError("tool_choice must be \"auto\", \"none\", \"required\" or "
                         "{\"type\": \"function\", \"function\": {\"name\": ...}} naming "
                         "one of the tools", param="tool_choice")
    if name not in names:
        raise ShapeError(f"tool_choice names {name!r}, which is not among the tools",
                         param="tool_choice")
    return str(name)
