"""A real `specchat serve` process (tests/support/serve_fake_cli.py: the real CLI and server with a
fake model) given hostile schemas, tools and numbers: a one-line 400 before any model call,
streamed or not, never a fetch, a file read, a 500 or a hang; /health answers throughout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.fakeserve import MODEL, Server, start, stop
from tests.support.listener import Listener

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("serve-schemas"))
    yield server
    stop(server)
    log = server.log_text()
    assert "Traceback" not in log and "RecursionError" not in log and " 500 " not in log


def _refused(served: Server, body: dict[str, Any], param: str) -> str:
    """The request is a one-line 400 naming `param`, streamed or not, with no model call."""
    before = served.model_calls()
    for stream in (False, True):
        response = httpx.post(served.url + "/v1/chat/completions", timeout=60,
                              json={"model": MODEL, "max_tokens": 4, **body, "stream": stream})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and "\n" not in error["message"]
        assert len(error["message"]) < 400, error["message"]
    assert served.model_calls() == before
    assert httpx.get(served.url + "/health", timeout=10).status_code == 200
    return str(error["message"])


def _tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"messages": USER, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": parameters}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}}}


@pytest.mark.parametrize("ref", ["http://127.0.0.1:{port}/s.json", "file:///dev/zero",
                                 "file:///etc/hostname", "urn:other:doc"])
def test_a_tool_schema_that_names_a_url_or_a_file_is_refused_unfetched(
        served: Server, listener: Listener, ref: str) -> None:
    params = {"$id": "urn:x:p", "type": "object", "properties": {},
              "not": {"$ref": ref.format(port=listener.port)}}
    message = _refused(served, _tool(params), "tools[0].function.parameters")
    assert "$ref" in message
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": params}}
    _refused(served, {"messages": USER, "response_format": schema},
             "response_format.json_schema.schema")
    assert listener.connections == 0


@pytest.mark.parametrize("pattern", ["(", "(?=x)y"])
def test_an_invalid_pattern_is_refused_before_generating(served: Server, pattern: str) -> None:
    params = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    assert "pattern" in _refused(served, _tool(params), "tools[0].function.parameters")


def test_a_tool_choice_that_is_no_choice_is_refused(served: Server) -> None:
    body = {**_tool({"type": "object"}), "tool_choice": 5}
    message = _refused(served, body, "tool_choice")
    assert "None" not in message and '"required"' in message


def test_history_arguments_nested_past_reading_are_refused(served: Server) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[" * 1500}}
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    _refused(served, {"messages": messages}, "messages[1].tool_calls[0].function.arguments")


def test_tiny_sampling_numbers_act_as_their_limit_or_are_refused(served: Server) -> None:
    def answer(**fields: Any) -> str:
        response = httpx.post(served.url + "/v1/chat/completions", timeout=60,
                              json={"model": MODEL, "messages": USER, "max_tokens": 6,
                                    **fields})
        assert response.status_code == 200, response.text
        return str(response.json()["choices"][0]["message"]["content"])

    greedy = answer(temperature=0)
    assert answer(temperature=1e-320, seed=1) == greedy
    assert answer(temperature=5e-324, seed=2) == greedy
    assert "repeat_penalty" in _refused(served, {"messages": USER, "repeat_penalty": 1e-320},
                                        "repeat_penalty")


def test_a_logit_bias_that_bans_every_token_is_one_line(served: Server) -> None:
    banned = {str(token): False for token in range(32)}  # the whole fake vocabulary
    before = served.model_calls()
    for stream in (False, True):
        response = httpx.post(served.url + "/v1/chat/completions", timeout=60,
                              json={"model": MODEL, "messages": USER, "max_tokens": 4,
                                    "logit_bias": banned, "stream": stream})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "logit_bias" and "ban fewer" in error["message"]
    assert served.model_calls() > before  # found at the first step, not guessed up front

