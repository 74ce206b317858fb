"""Agent frameworks as their users write them, against a running `specchat serve`:
`python -m tests.support.agent_clients FRAMEWORK URL KEY` runs that framework's scenarios and prints
one JSON object, scenario name -> what came back (the parsed output, the tool calls the
framework ran, the streamed pieces). tests/serve/test_agents_real.py starts the server and this
process, and judges the results. Exit 3: the framework is not installed.

The models are Pydantic's, nested, with an Enum and lists: Pydantic writes them as $refs
into $defs, in tool parameters (instructor's TOOLS mode, pydantic-ai's output tool,
langchain's function calling) and in response_format (openai-agents' output_type, beside
its tools; pydantic-ai's NativeOutput; langchain's json_schema).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

MODEL = "gpt-4o-mini"  # any name: the server answers with the model it serves
ASK_REPORT = "Give a short weather report for Paris: 18 degrees celsius."
ASK_WEATHER = "What is the weather in Paris? Use the get_weather tool."
WEATHER_SAYS = "18 degrees celsius, sunny"
ANSWER_TOKENS = 300


class Unit(StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Reading(BaseModel):
    city: str = Field(max_length=30)
    temperature: int
    unit: Unit


class Report(BaseModel):
    readings: list[Reading] = Field(min_length=1, max_length=2)
    summary: str = Field(max_length=40)


CALLED: list[str] = []  # the cities get_weather was called with, in order


def get_weather(city: str) -> str:
    """The current weather in a city."""
    CALLED.append(city)
    return WEATHER_SAYS


def ran(outcome: dict[str, Any]) -> dict[str, Any]:
    """The outcome with the tool calls made while it ran (and a fresh list for the next)."""
    outcome = {**outcome, "called": list(CALLED)}
    CALLED.clear()
    return outcome


def instructor_scenarios(url: str, key: str) -> dict[str, Any]:
    import instructor
    from openai import OpenAI

    client = instructor.from_openai(OpenAI(base_url=url, api_key=key),
                                    mode=instructor.Mode.TOOLS)
    report = client.chat.completions.create(
        model=MODEL, response_model=Report, messages=[{"role": "user", "content": ASK_REPORT}],
        temperature=0, max_tokens=ANSWER_TOKENS, max_retries=0)
    return {"report_tools_mode": ran({"output": report.model_dump(mode="json")})}


def pydantic_ai_scenarios(url: str, key: str) -> dict[str, Any]:
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=url, api_key=key))
    settings: Any = {"temperature": 0, "max_tokens": ANSWER_TOKENS}
    out: dict[str, Any] = {}
    tooled = Agent(model, output_type=Report, tools=[get_weather], model_settings=settings)
    native = Agent(model, output_type=NativeOutput(Report), tools=[get_weather],
                   model_settings=settings)
    result = native.run_sync(ASK_REPORT)
    out["native_output_beside_tools"] = ran({"output": result.output.model_dump(mode="json")})

    async def streamed() -> dict[str, Any]:
        async with tooled.run_stream(ASK_WEATHER + " Then report it.") as run:
            partials = [partial async for partial in run.stream_output()]
        return {"output": partials[-1].model_dump(mode="json"), "pieces": len(partials)}

    out["streamed_tool_then_output_tool"] = ran(asyncio.run(streamed()))
    return out


def openai_agents_scenarios(url: str, key: str) -> dict[str, Any]:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # traces would go to OpenAI's servers
    model = OpenAIChatCompletionsModel(model=MODEL,
                                       openai_client=AsyncOpenAI(base_url=url, api_key=key))
    settings = ModelSettings(temperature=0, max_tokens=ANSWER_TOKENS)
    tool = function_tool(get_weather)
    out: dict[str, Any] = {}
    agent = Agent(name="weather", instructions="You report the weather.", model=model,
                  tools=[tool], output_type=Report, model_settings=settings)
    result = Runner.run_sync(agent, ASK_REPORT)
    out["output_type_beside_tools"] = ran({"output": result.final_output.model_dump(
        mode="json")})
    # A streamed call, run; the tool's result is the answer.
    helper = Agent(name="helper", instructions="Answer briefly; call tools when asked.",
                   model=model, tools=[tool], tool_use_behavior="stop_on_first_tool",
                   model_settings=settings.resolve(ModelSettings(tool_choice="required")))

    async def streamed() -> dict[str, Any]:
        run = Runner.run_streamed(helper, ASK_WEATHER)
        kinds = [event.type async for event in run.stream_events()]
        return {"text": str(run.final_output), "events": len(kinds)}

    out["streamed_tool_round_trip"] = ran(asyncio.run(streamed()))
    return out


def langchain_scenarios(url: str, key: str) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=url, api_key=key, temperature=0,
                     max_completion_tokens=ANSWER_TOKENS)
    out: dict[str, Any] = {}
    with_tools = llm.bind_tools([get_weather], tool_choice="get_weather")
    question = HumanMessage(ASK_WEATHER)
    asked = with_tools.invoke([question])
    history: list[Any] = [question, asked]
    for call in asked.tool_calls:
        history.append(ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"]))
    # The answer after the result (tool_choice "none": the small model would ask again).
    answer = llm.bind_tools([get_weather], tool_choice="none").invoke(history)
    out["tool_round_trip"] = ran({"calls": [c["name"] for c in asked.tool_calls],
                                  "text": str(answer.content)})
    report = llm.with_structured_output(Report, method="function_calling").invoke(ASK_REPORT)
    assert isinstance(report, Report)
    out["structured_function_calling"] = ran({"output": report.model_dump(mode="json")})
    chunks = [str(chunk.content) for chunk in llm.stream("Say hello in three words.")]
    out["streamed"] = ran({"text": "".join(chunks), "pieces": len(chunks)})
    return out


SCENARIOS: dict[str, tuple[str, Callable[[str, str], dict[str, Any]]]] = {
    "instructor": ("instructor", instructor_scenarios),
    "pydantic-ai": ("pydantic_ai", pydantic_ai_scenarios),
    "openai-agents": ("agents", openai_agents_scenarios),
    "langchain-openai": ("langchain_openai", langchain_scenarios),
}


def main(argv: list[str]) -> int:
    framework, url, key = argv
    module, run = SCENARIOS[framework]
    try:
        __import__(module)
    except ImportError as exc:
        print(f"{framework} is not installed: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(run(url, key)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
