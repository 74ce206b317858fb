"""What `--endpoint` sends and how it reads a server that reports less than specchat serve:
every sampler setting explicitly (a server's own defaults must not change a temperature-0
answer), the answer's format, no broken character at a max_tokens cut, and figures the server
did not report shown as unknown."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from specchat.backend.remote import RemoteRuntime
from specchat.engine.events import Chunk, Finished
from specchat.engine.options import GenerationOptions, SamplingOptions, Structure
from specchat.term.summary import summary_line


def test_every_sampler_setting_is_sent_off_values_included() -> None:
    fields = RemoteRuntime._fields(GenerationOptions(max_tokens=9))
    assert fields["temperature"] == 0.0 and fields["top_p"] == 1.0
    assert fields["extra_body"] == {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0,
                                    "repetition_penalty": 1.0, "repeat_last_n": 64}
    assert "response_format" not in fields and "logit_bias" not in fields


def test_format_schema_and_bias_are_sent() -> None:
    schema = {"type": "object"}
    options = GenerationOptions(structure=Structure("json_schema", json.dumps(schema), False),
                                sampling=SamplingOptions(logit_bias=((5, -100.0),)))
    fields = RemoteRuntime._fields(options)
    assert fields["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": schema, "strict": False}}
    assert fields["logit_bias"] == {"5": -100.0}
    assert RemoteRuntime._fields(GenerationOptions(structure=Structure("json")))[
        "response_format"] == {"type": "json_object"}
    grammar = RemoteRuntime._fields(GenerationOptions(structure=Structure("grammar", "a")))
    assert grammar["extra_body"]["grammar"] == "a"


class FakeCall:
    """What openai's with_streaming_response.create gives: a context manager over the raw
    HTTP response, here an event stream of `chunks` and [DONE]."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        body = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks)
        self.http_response = SimpleNamespace(
            headers={"content-type": "text/event-stream"},
            iter_bytes=lambda: iter([body, b"data: [DONE]\n\n"]))

    def __enter__(self) -> FakeCall:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def piece(text: str, reason: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": reason}]}


def events(chunks: list[dict[str, Any]]) -> tuple[list[Chunk], Finished]:
    from openai.types.chat import ChatCompletionChunk

    runtime = object.__new__(RemoteRuntime)
    runtime._openai = SimpleNamespace(OpenAIError=RuntimeError)  # type: ignore[attr-defined]
    runtime.url = "http://x/v1"
    *shown, finished = list(runtime._events(lambda: FakeCall(chunks), ChatCompletionChunk,
                                            lambda choice: choice.delta.content, 100))
    assert isinstance(finished, Finished)
    return [c for c in shown if isinstance(c, Chunk)], finished


def test_a_cut_answer_never_ends_in_a_broken_character() -> None:
    shown, finished = events([piece("caf"), piece("\ufffd", "length")])
    assert finished.text == "caf" and "".join(c.text for c in shown) == "caf"
    # A replacement character the server meant (not at a cut) is kept, in order.
    shown, finished = events([piece("a\ufffd"), piece("b"), piece("\ufffd"), piece("", "stop")])
    assert finished.text == "a\ufffdb\ufffd" and "".join(c.text for c in shown) == finished.text


def test_figures_the_server_did_not_report_are_unknown() -> None:
    _, finished = events([piece("hello"), piece(" there", "stop")])
    stats = finished.stats
    line = summary_line(stats, finished.reason)
    assert "prompt unknown tok" in line and "tok/step unknown" in line
    assert "0.00 tok/step" not in line and "prompt 0 tok" not in line
    data = stats.to_dict()
    assert data["prompt_tokens"] is None and data["steps"] is None
    assert data["tokens_per_step"] is None and data["acceptance"] is None
    assert data["generated"] == 2  # counted from the stream
