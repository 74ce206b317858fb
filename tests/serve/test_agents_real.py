"""Agent frameworks against a real `specchat serve` process on the real Qwen2.5-Coder 0.5B
(the smallest model here whose template defines tools): each framework runs as its own
process (tests/support/agent_clients.py) with nested Pydantic models (an Enum, lists, a nested
model: $refs into $defs), a tool round trip, structured output beside tools, streaming.
A framework that is not installed is skipped. The model name the clients send is not the
served one: the server answers any name."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clients import WEATHER_SAYS, Report
from tests.support.realserve import KEY, ROOT, Served, serve_preset

pytest.importorskip("openai")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
pytestmark = [pytest.mark.real, pytest.mark.slow]

QWEN = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def qwen_served(real_model_path: Callable[[str], Path],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve_preset(tmp_path_factory.mktemp("serve-agents"), real_model_path(QWEN), QWEN)


def run_client(served: Served, framework: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "tests.support.agent_clients", framework,
                           served.url + "/v1", KEY], cwd=ROOT, env=served.env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode == 3:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, f"{done.stderr}\n--- server log ---\n{served.log_text()}"
    results: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def report(outcome: dict[str, Any]) -> Report:
    """The scenario's output, validated again here (and so against the $defs schema)."""
    found = Report.model_validate(outcome["output"])
    assert found.readings and all(r.city for r in found.readings)
    return found


def called_paris(outcome: dict[str, Any]) -> None:
    assert outcome["called"] and all("paris" in city.lower() for city in outcome["called"])


def test_instructor_tools_mode_on_nested_models(qwen_served: Served) -> None:
    results = run_client(qwen_served, "instructor")
    report(results["report_tools_mode"])


def test_pydantic_ai_tool_round_trip_output_tool_and_native_output(qwen_served: Served) -> None:
    results = run_client(qwen_served, "pydantic-ai")
    streamed = results["streamed_tool_then_output_tool"]  # run_stream: a call, its result,
    report(streamed)                                      # then the output tool's call
    called_paris(streamed)
    assert streamed["pieces"] >= 1
    report(results["native_output_beside_tools"])  # response_format beside tools


def test_openai_agents_output_type_beside_tools_and_a_streamed_tool(qwen_served: Served
                                                                    ) -> None:
    results = run_client(qwen_served, "openai-agents")
    report(results["output_type_beside_tools"])
    streamed = results["streamed_tool_round_trip"]
    called_paris(streamed)
    assert streamed["text"] == WEATHER_SAYS and streamed["events"] > 1


def test_langchain_bind_tools_structured_output_and_stream(qwen_served: Served) -> None:
    results = run_client(qwen_served, "langchain-openai")
    trip = results["tool_round_trip"]
    assert trip["calls"] == ["get_weather"]
    called_paris(trip)
    assert trip["text"].strip() and "<tool_call>" not in trip["text"]
    report(results["structured_function_calling"])
    streamed = results["streamed"]
    assert streamed["text"].strip() and streamed["pieces"] > 1
