"""The request fields that shape an answer beyond sampling: `response_format` (and
llama-server's `json_schema` and `grammar`), `tools` / `tool_choice` /
`parallel_tool_calls`, and `logit_bias`; each to what the backend takes, or a 400 naming it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from specchat.engine.options import Structure
from specchat.llm.tools import CHOICES, NAME, Tool, ToolSet
from specchat.serve.errors import bad_request

# OpenAI caps a bias at +-100: -100 all but bans a token, 100 all but forces it.
BIAS_LIMIT = 100.0


def structure_of(response_format: Any, json_schema: Any = None,
                 grammar: Any = None) -> Structure | None:
    """What the answer must be; None for free text."""
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise bad_request("grammar must be a GBNF or Lark grammar as a string",
                              param="grammar")
        return Structure("grammar", grammar)
    if json_schema is not None:  # llama-server's shorthand
        return Structure("json_schema", _schema_text(json_schema, "json_schema"))
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise bad_request("response_format must be an object like {\"type\": \"json_object\"}",
                          param="response_format")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")  # llama-server accepts a schema here too
        if schema is None:
            return Structure("json")
        return Structure("json_schema", _schema_text(schema, "response_format.schema"))
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise bad_request("response_format.json_schema needs a \"schema\" object (and a "
                              "\"name\")", param="response_format.json_schema")
        strict = spec.get("strict")
        return Structure("json_schema", _schema_text(spec["schema"],
                                                     "response_format.json_schema.schema"),
                         strict=strict is not False)
    raise bad_request(f"response_format.type {kind!r} is not supported: use text, "
                      "json_object or json_schema", param="response_format.type")


def _schema_text(schema: Any, param: str) -> str:
    if not isinstance(schema, (dict, bool)):
        raise bad_request(f"{param} must be a JSON schema object", param=param)
    return json.dumps(schema, ensure_ascii=False)


def toolset_of(tools: Any, choice: Any, parallel: Any) -> ToolSet | None:
    """The request's tools and how they may be used; None when it has none."""
    if not tools:
        if choice not in (None, "none", "auto"):
            raise bad_request("tool_choice asks for a tool call, but the request has no "
                              "tools", param="tool_choice")
        return None
    if not isinstance(tools, list):
        raise bad_request("tools must be a list of {\"type\": \"function\", ...}",
                          param="tools")
    parsed = tuple(_tool(tool, i) for i, tool in enumerate(tools))
    names = [t.name for t in parsed]
    if len(set(names)) != len(names):
        raise bad_request("tools names the same function twice", param="tools")
    chosen = _choice(choice, names)
    return ToolSet(parsed, chosen, parallel is not False)


def _tool(tool: Any, i: int) -> Tool:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise bad_request(f"{where}.type {kind!r} is not supported: only function tools",
                          param=f"{where}.type")
    function = tool.get("function")
    if not isinstance(function, dict):
        raise bad_request(f"{where}.function must be an object", param=f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise bad_request(f"{where}.function.name must be 1-64 letters, digits, _ . : or -",
                          param=f"{where}.function.name")
    params = function.get("parameters") or {"type": "object"}
    if not isinstance(params, dict):
        raise bad_request(f"{where}.function.parameters must be a JSON schema object",
                          param=f"{where}.function.parameters")
    description = function.get("description") or ""
    if not isinstance(description, str):
        raise bad_request(f"{where}.function.description must be a string",
                          param=f"{where}.function.description")
    return Tool(name, description, params, strict=function.get("strict") is True)


def _choice(choice: Any, names: list[str]) -> str:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise bad_request(f"tool_choice {choice!r}: use auto, none, required or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                              param="tool_choice")
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if name not in names:
        raise bad_request(f"tool_choice names {name!r}, which is not among the tools",
                          param="tool_choice")
    return str(name)


def logit_bias_of(bias: Any) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id": bias} (llama-server's [[id, bias], ...] too; false bans)."""
    if bias is None:
        return ()
    items = bias.items() if isinstance(bias, dict) else bias
    out = []
    try:
        for key, value in items:
            token = int(key)
            banned = value is False
            if not banned and (isinstance(value, bool) or not isinstance(value, (int, float))
                               or not -BIAS_LIMIT <= value <= BIAS_LIMIT):
                raise ValueError
            if token < 0:
                raise ValueError
            out.append((token, -math.inf if banned else float(value)))
    except (TypeError, ValueError):
        raise bad_request("logit_bias must map token ids to numbers from -100 to 100, like "
                          "{\"1234\": -100}", param="logit_bias") from None
    return tuple(out)


def tool_messages(message: Any, index: int) -> dict[str, Any]:
    """The tool-call fields of one history message (assistant calls, a tool's result)."""
    out: dict[str, Any] = {}
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [_history_call(call, index, j) for j, call in enumerate(calls)]
    call_id = getattr(message, "tool_call_id", None)
    if call_id is not None:
        out["tool_call_id"] = str(call_id)
    name = getattr(message, "name", None)
    if name is not None and message.role == "tool":
        out["name"] = str(name)
    return out


def _history_call(call: Any, index: int, j: int) -> dict[str, Any]:
    where = f"messages[{index}].tool_calls[{j}]"
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise bad_request(f"{where} must be {{\"id\", \"type\": \"function\", \"function\": "
                          "{\"name\", \"arguments\"}}", param=where)
    function = call["function"]
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": str(call.get("id") or f"call_{index}_{j}"), "type": "function",
            "function": {"name": str(function.get("name", "")), "arguments": arguments}}
