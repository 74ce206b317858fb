"""The request fields that shape an answer beyond sampling, as a 400 naming the field when
they are wrong: `response_format` / `json_schema` / `grammar` and `tools` (checked in
llm/shapes.py, which `bench --sessions` shares), and `logit_bias`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from specchat.engine.options import Structure
from specchat.llm import shapes
from specchat.llm.schemacheck import MAX_DEPTH, nests_deeper
from specchat.llm.shapes import ShapeError, response_structure
from specchat.llm.tools import ToolSet
from specchat.serve.errors import bad_request

# OpenAI caps a bias at +-100: -100 all but bans a token, 100 all but forces it.
BIAS_LIMIT = 100.0


def structure_from_request(response_format: Any, json_schema: Any = None,
                 grammar: Any = None) -> Structure | None:
    """What the answer must be; None for free text."""
    try:
        return response_structure(response_format, json_schema, grammar)
    except ShapeError as exc:
        raise bad_request(exc.message, param=exc.param) from None


def toolset_from_request(tools: Any, choice: Any, parallel: Any) -> ToolSet | None:
    """The request's tools and how they may be used; None when it has none."""
    try:
        return shapes.toolset_of(tools, choice, parallel)
    except ShapeError as exc:
        raise bad_request(exc.message, param=exc.param) from None


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
    """The tool-call fields of one message of the request (assistant calls, a tool's result)."""
    out: dict[str, Any] = {}
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [_message_call(call, index, j) for j, call in enumerate(calls)]
    call_id = getattr(message, "tool_call_id", None)
    if call_id is not None:
        out["tool_call_id"] = str(call_id)
    name = getattr(message, "name", None)
    if name is not None and message.role == "tool":
        out["name"] = str(name)
    return out


def _message_call(call: Any, index: int, j: int) -> dict[str, Any]:
    where = f"messages[{index}].tool_calls[{j}]"
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise bad_request(f"{where} must be {{\"id\", \"type\": \"function\", \"function\": "
                          "{\"name\", \"arguments\"}}", param=where)
    function = call["function"]
    arguments = function.get("arguments", "{}")
    if _too_deep(arguments):
        raise bad_request(f"{where}.function.arguments nests deeper than {MAX_DEPTH} "
                          "levels: send flatter arguments", param=f"{where}.function.arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": str(call.get("id") or f"call_{index}_{j}"), "type": "function",
            "function": {"name": str(function.get("name", "")), "arguments": arguments}}


def _too_deep(arguments: Any) -> bool:
    """Whether an earlier call's arguments nest deeper than MAX_DEPTH (the template reads
    them as an object; Python's JSON reader and the renderer recurse)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return False  # not JSON: the template gets the text as it was sent
    except RecursionError:
        return True
    return nests_deeper(value, MAX_DEPTH)
