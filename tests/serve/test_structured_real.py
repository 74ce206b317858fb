"""Structured answers from a real `specchat serve` process on the real Qwen2.5-Coder 1.5B,
seen by outside clients: the real `openai` client (json_schema answers on schemas no other
test uses, tool calls, tool_choice "none", a conversation that carries tool results) and
simonw's `llm` (`--schema`, and a tool through `--functions`) as its own process, when it is
installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.realserve import KEY, Served, serve_preset

openai = pytest.importorskip("openai")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
pytestmark = [pytest.mark.real, pytest.mark.slow]

QWEN = "qwen2.5-coder-1.5b"
HELD_OUT: list[tuple[str, dict[str, Any]]] = [
    ("Describe the film Alien (1979).", {
        "type": "object", "properties": {
            "title": {"type": "string", "maxLength": 40}, "year": {"type": "integer"},
            "genres": {"type": "array", "items": {"type": "string", "maxLength": 20},
                       "maxItems": 3}},
        "required": ["title", "year", "genres"], "additionalProperties": False}),
    ("Classify the sentiment of: 'I love this phone, the battery lasts for days.'", {
        "type": "object", "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["sentiment", "confidence"], "additionalProperties": False}),
    ("Give the address of a fictional bakery in Berlin.", {
        "type": "object", "properties": {
            "name": {"type": "string", "maxLength": 40},
            "address": {"type": "object", "properties": {
                "street": {"type": "string", "maxLength": 40},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                "city": {"const": "Berlin"}},
                "required": ["street", "zip", "city"], "additionalProperties": False},
            "open_sundays": {"type": "boolean"}},
        "required": ["name", "address", "open_sundays"], "additionalProperties": False}),
    ("List two prime numbers greater than 10 and say whether 21 is prime.", {
        "type": "object", "properties": {
            "primes": {"type": "array", "items": {"type": "integer"}, "minItems": 2,
                       "maxItems": 2},
            "is_21_prime": {"type": "boolean"}},
        "required": ["primes", "is_21_prime"], "additionalProperties": False}),
]
WEATHER_PARAMS = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"}, "from": {"type": "string"},
            "to": {"type": "string"}}, "required": ["amount", "from", "to"]}}},
]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture(scope="module")
def qwen_served(real_model_path: Callable[[str], Path],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve_preset(tmp_path_factory.mktemp("serve-qwen"), real_model_path(QWEN), QWEN)


def check_calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    """Every call names a declared tool and its arguments validate against its parameters."""
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    calls = []
    for call in message.tool_calls or []:
        assert call.type == "function" and call.id
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, params[call.function.name])
        calls.append((call.function.name, args))
    return calls


def test_json_schema_answers_validate_on_held_out_schemas(qwen_served: Served) -> None:
    client = qwen_served.client()
    for i, (question, schema) in enumerate(HELD_OUT):
        reply = client.chat.completions.create(
            model=QWEN, messages=[{"role": "user", "content": question}], temperature=0,
            max_tokens=160, response_format={"type": "json_schema", "json_schema": {
                "name": f"held_out_{i}", "schema": schema, "strict": True}})
        choice = reply.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content or ""), schema)
    streamed = client.chat.completions.create(
        model=QWEN, messages=[{"role": "user", "content": "A cat's name and age, nothing else."}],
        max_tokens=160, temperature=0.7, seed=3, stream=True,
        response_format={"type": "json_object"})
    chunks = [c.choices[0] for c in streamed if c.choices]
    assert chunks[-1].finish_reason == "stop"
    assert isinstance(json.loads("".join(c.delta.content or "" for c in chunks)), dict)


def test_tool_calls_parse_and_match_their_parameters(qwen_served: Served) -> None:
    client = qwen_served.client()
    for choice in ("auto", "required", {"type": "function",
                                        "function": {"name": "get_weather"}}):
        reply = client.chat.completions.create(
            model=QWEN, messages=ASK_WEATHER, tools=TOOLS, tool_choice=choice,  # type: ignore[arg-type]
            temperature=0, max_tokens=96)
        calls = check_calls(reply.choices[0].message)
        assert reply.choices[0].finish_reason == "tool_calls", choice
        assert calls and calls[0][0] == "get_weather", choice
        assert "paris" in calls[0][1]["city"].lower()
    text = client.chat.completions.create(
        model=QWEN, messages=ASK_WEATHER, tools=TOOLS, tool_choice="none", temperature=0,
        max_tokens=32)
    assert not text.choices[0].message.tool_calls and text.choices[0].message.content
    assert text.choices[0].finish_reason in ("stop", "length")


def test_a_conversation_with_tool_results_continues(qwen_served: Served) -> None:
    client = qwen_served.client()
    first = client.chat.completions.create(model=QWEN, messages=ASK_WEATHER, tools=TOOLS,
                                           tool_choice="required", temperature=0,
                                           max_tokens=96)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    history: list[Any] = [
        *ASK_WEATHER,
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call.id, "type": "function", "function": {
                "name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id,
         "content": json.dumps({"temperature": 17, "unit": "celsius", "sky": "cloudy"})}]
    # "none": under "auto" the 1.5B model asks for the same call again at temperature 0
    # (its prompt does carry the result, as Qwen's template writes it: <tool_response>).
    answer = client.chat.completions.create(model=QWEN, messages=history, tools=TOOLS,
                                            tool_choice="none", temperature=0, max_tokens=48)
    message = answer.choices[0].message
    assert answer.choices[0].finish_reason in ("stop", "length") and not message.tool_calls
    assert "17" in (message.content or "")  # the tool's result reached the model


LLM = Path(sys.executable).with_name("llm")  # next to this Python: the venv's own


def run_llm(served: Served, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: specchat\n  model_name: {QWEN}\n  api_base: {served.url}/v1\n"
        "  api_key_name: specchat\n  supports_schema: true\n  supports_tools: true\n",
        encoding="utf-8")
    (home / "keys.json").write_text(json.dumps({"specchat": KEY}), encoding="utf-8")
    env = {**os.environ, "LLM_USER_PATH": str(home)}
    return subprocess.run([str(LLM), "-m", "specchat", "--no-log", *args],
                          env=env, capture_output=True, text=True, timeout=600)



@pytest.mark.skipif(not Path(LLM).exists(), reason="simonw's llm is not installed")
def test_llm_schema_and_tools(qwen_served: Served, tmp_path: Path) -> None:
    schema = run_llm(qwen_served, tmp_path, "--schema", "name, age int, likes_fish bool",
                     "-o", "temperature", "0", "Invent a cat.")
    assert schema.returncode == 0, schema.stderr
    record = json.loads(schema.stdout)
    assert isinstance(record["name"], str) and isinstance(record["age"], int)
    assert isinstance(record["likes_fish"], bool)
    tool = run_llm(qwen_served, tmp_path, "--functions",
                   "def get_weather(city: str) -> str:\n"
                   "    return 'It is 17 degrees and cloudy in ' + city\n",
                   "--td", "-o", "temperature", "0", "What is the weather in Paris?")
    assert tool.returncode == 0, tool.stderr
    # --td shows the call llm ran, from the server's tool_calls, and the result it sent back.
    # (What the 1.5B model says after the result is its own affair: at temperature 0 it
    # writes the call again as text, with or without the grammar.)
    assert "Tool call: get_weather({'city': 'Paris'})" in tool.stderr
    assert "It is 17 degrees and cloudy in Paris" in tool.stderr
