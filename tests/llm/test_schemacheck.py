"""Schemas in requests are data (llm/schemacheck.py through llm/shapes.py and llm/tools.py):
only references inside the schema resolve, nothing is fetched or opened, patterns run on RE2
and a bad one is refused before any answer, nesting and validation work are bounded."""

from __future__ import annotations

import json
from typing import Any

import jsonschema._keywords
import jsonschema._utils
import pytest

from specchat.llm import schemacheck
from specchat.llm.shapes import ShapeError, response_structure, toolset_of
from specchat.llm.tools import Tool, ToolCall, accepts
from tests.support.listener import Listener

NAMED = {"type": "function", "function": {"name": "f"}}


def tools_with(parameters: dict[str, Any], choice: Any = NAMED) -> Any:
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    return toolset_of([tool], choice, None)


def remote_refs(port: int) -> list[str]:
    return [f"http://127.0.0.1:{port}/s.json", f"https://127.0.0.1:{port}/s.json",
            "file:///etc/passwd", "file:///dev/zero", "urn:other:doc", "other.json#/x",
            f"//127.0.0.1:{port}/x", "/etc/hosts"]


def test_references_out_of_the_schema_are_refused_up_front(listener: Listener) -> None:
    for ref in remote_refs(listener.port):
        for key in ("$ref", "$dynamicRef"):
            params = {"$id": "urn:x:p", "type": "object", "properties": {},
                      "not": {key: ref}}
            with pytest.raises(ShapeError) as tool_error:
                tools_with(params)
            assert tool_error.value.param == "tools[0].function.parameters"
            assert key in tool_error.value.message and "\n" not in tool_error.value.message
            with pytest.raises(ShapeError):
                response_structure({"type": "json_schema",
                                    "json_schema": {"name": "x", "schema": params}})
    assert listener.connections == 0


def test_validating_arguments_never_fetches(listener: Listener) -> None:
    """Even a schema that skipped the up-front check (a caller's bug) cannot fetch: the
    registry validation resolves through retrieves nothing."""
    params = {"$id": "urn:x:p", "type": "object",
              "not": {"$ref": f"http://127.0.0.1:{listener.port}/s.json"}}
    accept = accepts([Tool("f", parameters=params)])
    assert not accept(ToolCall("call_1", "f", "{}"))
    assert listener.connections == 0


PERSON = {"$defs": {"Person": {"type": "object",
                               "properties": {"name": {"type": "string"},
                                              "friends": {"type": "array",
                                                          "items": {"$ref": "#/$defs/Person"}}},
                               "required": ["name"], "additionalProperties": False}},
          "type": "object", "properties": {"who": {"$ref": "#/$defs/Person"}},
          "required": ["who"]}


@pytest.mark.parametrize("params", [
    PERSON,
    {**PERSON, "$id": "urn:x:p"},
    json.loads(json.dumps(PERSON).replace("$defs", "definitions")),
    {"$schema": "http://json-schema.org/draft-07/schema#",
     **json.loads(json.dumps(PERSON).replace("$defs", "definitions"))},
])
def test_local_pointers_validate_against_the_parameters_as_root(params: dict[str, Any]) -> None:
    tools = tools_with(params)
    accept = accepts(tools.tools)
    good = {"who": {"name": "Ann", "friends": [{"name": "Bo", "friends": []}]}}
    bad = {"who": {"name": "Ann", "friends": [{"name": 5}]}}
    assert accept(ToolCall("c", "f", json.dumps(good)))
    assert not accept(ToolCall("c", "f", json.dumps(bad)))


def test_a_pointer_to_nothing_is_refused() -> None:
    with pytest.raises(ShapeError, match="points at nothing"):
        tools_with({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}})


@pytest.mark.parametrize("pattern", ["(", "(?=a)b", r"(a)\1", "a{2000}"])
def test_patterns_the_linear_engine_cannot_run_are_refused(pattern: str) -> None:
    params = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    with pytest.raises(ShapeError, match="pattern"):
        tools_with(params)
    with pytest.raises(ShapeError, match="pattern"):
        tools_with({"type": "object", "patternProperties": {pattern: {}}})


def test_patterns_never_reach_pythons_backtracking_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("a request's pattern reached Python's re")

    for module in (jsonschema._keywords, jsonschema._utils):
        monkeypatch.setattr(module.re, "search", refuse)  # type: ignore[attr-defined]
    params = {"type": "object", "not": {"properties": {"s": {"pattern": "^(a+)+b$"}}},
              "patternProperties": {"^x_": {"type": "integer"}},
              "properties": {"s": {"type": "string", "pattern": "^[a-c]+$"},
                             "u": {"type": "string", "pattern": "^\\u00e9+$"}},
              "additionalProperties": False}
    accept = accepts(tools_with(params).tools)
    assert accept(ToolCall("c", "f", json.dumps({"s": "a" * 10_000 + "c", "x_1": 2,
                                                 "u": "éé"})))
    assert not accept(ToolCall("c", "f", json.dumps({"s": "abc", "y": 1})))
    assert not accept(ToolCall("c", "f", json.dumps({"x_1": "two"})))


def test_a_schema_nested_100k_deep_is_refused_in_one_line() -> None:
    schema: dict[str, Any] = {}
    inner = schema
    for _ in range(100_000):
        inner["not"] = {}
        inner = inner["not"]
    with pytest.raises(ShapeError, match="deeper than") as error:
        response_structure({"type": "json_schema", "json_schema": {"name": "d",
                                                                   "schema": schema}})
    assert "\n" not in error.value.message


def test_costly_validations_end_with_a_problem() -> None:
    cycle = {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
    doubling: dict[str, Any] = {"$defs": {"a0": {"type": "integer"}}, "$ref": "#/$defs/a30"}
    for i in range(1, 31):
        doubling["$defs"][f"a{i}"] = {"anyOf": [{"$ref": f"#/$defs/a{i - 1}"}] * 2}
    for schema in (cycle, doubling):
        schemacheck.check(schema)
        problem = schemacheck.first_error(schemacheck.validator(schema), "x")
        assert problem is not None and "\n" not in problem


@pytest.mark.parametrize("choice", [5, {"type": "function"}, {"function": {"name": 3}}, []])
def test_a_tool_choice_that_names_no_tool_is_a_clear_error(choice: Any) -> None:
    with pytest.raises(ShapeError) as error:
        tools_with({"type": "object"}, choice=choice)
    assert error.value.param == "tool_choice" and "None" not in error.value.message
    assert '"required"' in error.value.message


def test_unique_items_keeps_json_schemas_equality() -> None:
    check = schemacheck.validator({"type": "array", "uniqueItems": True})
    for same in ([1, 1.0], [{"a": [1], "b": None}, {"b": None, "a": [1.0]}], ["x", "x"]):
        assert schemacheck.first_error(check, same) is not None, same
    for different in ([True, 1], [False, 0, None], ["1", 1], [[1, 2], [2, 1]],
                      [{"a": 1}, {"a": True}]):
        assert schemacheck.first_error(check, different) is None, different
