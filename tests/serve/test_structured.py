"""Structured answers through the HTTP API on fake models: response_format, tools and
tool_choice, the tool role, logprobs, logit_bias, token prompts, top_p 0, and the fields
that are refused by name. The fake grammars stand in for llguidance (the real one is in
tests/engine/test_structured_real.py); here the server's side is under test: what it asks the
backend for and how it shapes the answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient

from specchat.backend.base import Message, RuntimeInfo
from specchat.backend.local import Runtime
from specchat.engine.options import Structure
from specchat.llm.tools import ToolSet
from specchat.serve.app import ServeConfig, create_app
from specchat.serve.worker import READY, Worker
from specchat.settings.schema import BY_NAME, GENERATION, group
from tests.support.fakegrammar import FakeGrammar
from tests.support.fakes import FakeModel
from tests.support.sse import sse

DEFAULTS = {name: BY_NAME[name].default for name in group(GENERATION) if name != "system"}
CALL = b'{"name": "get_weather", "arguments": {"city": "Paris"}}'
PIECES = [b"<tool_call>", b"\n", CALL, b"</tool_call>", b"Hello", b" world", b"{\"a\": 1}",
          b"\xc3", b"\xa9", b"<eos>",
          b'{"name": "get_time", "arguments": {"zone": "CET"}}']
TC, NL, BODY, END, HELLO_, WORLD, JSON, E1, E2, EOS, BODY2 = range(len(PIECES))
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
USER = [{"role": "user", "content": "weather?"}]


def forcing(*tokens: int) -> FakeGrammar:
    """A grammar that allows exactly `tokens`, then the end."""
    table = {i: {t: i + 1} for i, t in enumerate(tokens)}
    return FakeGrammar(table, len(PIECES), accepting=[len(tokens)], eog=[EOS])


class FakeGuides:
    """Records what the runtime asked for; answers with forcing grammars."""

    def __init__(self) -> None:
        self.prompts: list[tuple[list[Message], ToolSet]] = []
        self.asked: list[tuple[Structure | None, ToolSet | None]] = []
        self.calls = (TC, NL, BODY, NL, END)  # what a tool grammar forces

    def prompt(self, messages: Sequence[Message], tools: ToolSet) -> list[int]:
        self.prompts.append((list(messages), tools))
        return [HELLO_, WORLD, len(messages) % 3]

    def constraint(self, structure: Structure | None,
                   tools: ToolSet | None) -> FakeGrammar | None:
        self.asked.append((structure, tools))
        if tools is not None and tools.callable:
            return forcing(*self.calls)
        return forcing(JSON) if structure is not None else None


@pytest.fixture
def served() -> Iterator[tuple[TestClient, FakeGuides]]:
    guides = FakeGuides()
    target = FakeModel(len(PIECES), seed=2, eog=(EOS,), pieces=PIECES)
    runtime = Runtime(target=target, draft=None, guides=guides,
                      chat_tokens=lambda messages: [HELLO_, WORLD, len(messages) % 3],
                      raw_tokens=lambda text: [HELLO_] * max(1, len(text) % 5),
                      info=RuntimeInfo(target_name="fake"))
    worker = Worker(lambda: runtime, 4)
    worker.start()
    for _ in range(1000):
        if worker.state == READY:
            break
        threading.Event().wait(0.01)
    app = create_app(worker, ServeConfig(model="fake", defaults=dict(
        DEFAULTS, max_tokens=8, spec="ngram")))
    yield TestClient(app, base_url="http://localhost"), guides  # a Host the server accepts
    worker.stop()


def chat(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/chat/completions", json={"model": "fake", "messages": USER, **body})


def test_required_tool_choice_answers_with_tool_calls(served: tuple[TestClient, FakeGuides]
                                                      ) -> None:
    client, guides = served
    r = chat(client, tools=[WEATHER], tool_choice="required", max_tokens=20)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    tools = guides.asked[-1][1]
    assert tools is not None and tools.choice == "required"
    assert [t.name for t in guides.prompts[-1][1].offered] == ["get_weather"]


def test_streamed_tool_calls_are_openai_deltas(served: tuple[TestClient, FakeGuides]) -> None:
    client, _ = served
    r = chat(client, tools=[WEATHER], tool_choice={"type": "function",
                                                   "function": {"name": "get_weather"}},
             stream=True, max_tokens=20)
    events = [e for e in sse(r) if e != "[DONE]"]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert [c["index"] for c in calls] == [0]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any(d.get("content") for d in deltas)  # the markers never leak as text


def test_several_calls_come_back_as_several_tool_calls_in_order(
        served: tuple[TestClient, FakeGuides]) -> None:
    client, guides = served
    guides.calls = (TC, NL, BODY, NL, END, NL, TC, NL, BODY2, NL, END)
    r = chat(client, tools=[WEATHER, TIME], max_tokens=20)
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    whole = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for c in choice["message"]["tool_calls"]]
    assert whole == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]
    assert len({c["id"] for c in choice["message"]["tool_calls"]}) == 2
    events = [e for e in sse(chat(client, tools=[WEATHER, TIME], max_tokens=20, stream=True))
              if e != "[DONE]"]
    deltas = [c for e in events if e["choices"]
              for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert [c["index"] for c in deltas] == [0, 1]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in deltas] == whole
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert guides.asked[-1][1] is not None and guides.asked[-1][1].parallel
    chat(client, tools=[WEATHER, TIME], parallel_tool_calls=False, max_tokens=20)
    assert guides.asked[-1][1] is not None and not guides.asked[-1][1].parallel


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_max_tokens_leaks_no_markup(served: tuple[TestClient, FakeGuides],
                                                  stream: bool) -> None:
    client, guides = served
    guides.calls = (HELLO_, TC, NL, BODY, NL, END)
    r = chat(client, tools=[WEATHER], max_tokens=3, stream=stream)
    if stream:
        events = [e for e in sse(r) if e != "[DONE]"]
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
        content = "".join(d.get("content") or "" for d in deltas)
        assert not any(d.get("tool_calls") for d in deltas)
        reason = events[-1]["choices"][0]["finish_reason"]
    else:
        choice = r.json()["choices"][0]
        content, reason = choice["message"]["content"], choice["finish_reason"]
        assert "tool_calls" not in choice["message"]
    assert content == "Hello" and reason == "length"


def test_response_format_beside_tools_reaches_the_grammar_and_the_prompt(
        served: tuple[TestClient, FakeGuides]) -> None:
    client, guides = served
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    r = chat(client, tools=[WEATHER], response_format=fmt, max_tokens=20)
    assert r.status_code == 200, r.text
    structure, tools = guides.asked[-1]
    assert structure == Structure("json_schema", '{"type": "object"}')
    assert tools is not None and tools.choice == "auto"
    note = guides.prompts[-1][0][-1]["content"]
    assert note.startswith("weather?") and "Unless you call a tool" in note
    chat(client, tools=[WEATHER], response_format=fmt, tool_choice="required", max_tokens=20)
    assert guides.prompts[-1][0][-1]["content"] == "weather?"  # a call is the answer


def test_tool_results_in_the_history_reach_the_template(
        served: tuple[TestClient, FakeGuides]) -> None:
    client, guides = served
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r = client.post("/v1/chat/completions", json={"model": "fake", "messages": history,
                                                  "tools": [WEATHER], "max_tokens": 3})
    assert r.status_code == 200, r.text
    messages, _ = guides.prompts[-1]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == "{\"city\": \"Paris\"}"
    assert messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}


def test_tool_choice_none_gives_text(served: tuple[TestClient, FakeGuides]) -> None:
    client, guides = served
    r = chat(client, tools=[WEATHER], tool_choice="none", max_tokens=4)
    choice = r.json()["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] != "tool_calls"
    assert guides.prompts == [] and guides.asked == []  # no tools in prompt, no grammar


def test_response_format_json(served: tuple[TestClient, FakeGuides]) -> None:
    client, guides = served
    for fmt, want in [({"type": "json_object"}, Structure("json")),
                      ({"type": "json_schema", "json_schema": {"name": "a", "strict": True,
                        "schema": {"type": "object"}}},
                       Structure("json_schema", '{"type": "object"}'))]:
        r = chat(client, response_format=fmt)
        assert r.json()["choices"][0]["message"]["content"] == '{"a": 1}'
        assert guides.asked[-1] == (want, None)
    r = client.post("/v1/completions", json={"model": "fake", "prompt": "x",
                                             "response_format": {"type": "json_object"}})
    assert r.json()["choices"][0]["text"] == '{"a": 1}'


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "sound"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema"),
    ({"response_format": {"type": "json_object", "schema": 123}}, "response_format.schema"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"logit_bias": {"1": 500}}, "logit_bias"),
    ({"logit_bias": {"99999": -100}}, "logit_bias"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"logprobs": True, "top_logprobs": 30}, "top_logprobs"),
])
def test_bad_structured_requests_are_400_naming_the_field(
        served: tuple[TestClient, FakeGuides], body: dict[str, Any], param: str) -> None:
    client, _ = served
    r = chat(client, **body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("body, param", [
    ({"echo": True}, "echo"), ({"suffix": "end"}, "suffix"), ({"best_of": 2}, "best_of"),
    ({"n": 3}, "n"), ({"prompt": [1, 99999]}, "prompt"),
])
def test_completion_fields_that_would_change_the_answer_are_refused(
        served: tuple[TestClient, FakeGuides], body: dict[str, Any], param: str) -> None:
    client, _ = served
    r = client.post("/v1/completions", json={"model": "fake", "prompt": "x", **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_chat_logprobs_join_to_the_content(served: tuple[TestClient, FakeGuides]) -> None:
    client, _ = served
    for stream, fmt in [(False, None), (True, None), (False, {"type": "json_object"})]:
        # (with the JSON grammar the answer ends with the end token: it has no entry)
        r = chat(client, logprobs=True, top_logprobs=2, max_tokens=6, stream=stream,
                 response_format=fmt)
        if stream:
            events = [e for e in sse(r) if e != "[DONE]" and e["choices"]]
            content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
            entries = [x for e in events if e["choices"][0].get("logprobs")
                       for x in e["choices"][0]["logprobs"]["content"]]
        else:
            choice = r.json()["choices"][0]
            content, entries = choice["message"]["content"], choice["logprobs"]["content"]
        assert "".join(e["token"] for e in entries) == content and entries
        for e in entries:
            assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 2 and e["bytes"] is not None
            assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]


def test_legacy_completion_logprobs_and_token_prompts(
        served: tuple[TestClient, FakeGuides]) -> None:
    client, _ = served
    text = client.post("/v1/completions", json={"model": "fake", "prompt": "abc",
                                                "max_tokens": 5, "logprobs": 1}).json()
    lp = text["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"])
    assert "".join(lp["tokens"]) == text["choices"][0]["text"]
    same = client.post("/v1/completions", json={"model": "fake", "prompt": [[HELLO_] * 3],
                                                "max_tokens": 5}).json()
    assert same["choices"][0]["text"] == text["choices"][0]["text"]  # "abc" is 3 x HELLO_


def test_top_p_zero_is_greedy_and_logit_bias_bans(served: tuple[TestClient, FakeGuides]
                                                  ) -> None:
    client, _ = served
    greedy = chat(client, temperature=0, max_tokens=8, logprobs=True).json()["choices"][0]
    top0 = chat(client, temperature=1.5, top_p=0, seed=1, max_tokens=8).json()
    assert top0["choices"][0]["message"] == greedy["message"]

    def tokens(choice: dict[str, Any]) -> list[int]:
        return [PIECES.index(bytes(e["bytes"])) for e in choice["logprobs"]["content"]]

    first = tokens(greedy)[0]
    other = chat(client, temperature=0, max_tokens=8, logprobs=True,
                 logit_bias={str(first): -100}).json()["choices"][0]
    assert first not in tokens(other) and tokens(other)


def test_model_may_be_left_out(served: tuple[TestClient, FakeGuides]) -> None:
    client, _ = served
    r = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == "fake"


def test_routes_answer_without_v1_too(served: tuple[TestClient, FakeGuides]) -> None:
    client, _ = served
    assert client.get("/models").json()["data"][0]["id"] == "fake"
    r = client.post("/chat/completions", json={"messages": USER, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "chat.completion"
    r = client.post("/completions", json={"prompt": "x", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "text_completion"
