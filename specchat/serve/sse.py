"""Server-sent events in OpenAI's chunk format, and the whole-answer bodies.

A chat stream is: a first chunk with the assistant role, one chunk per engine step that
produced text, a chunk with the finish reason, then (with stream_options.include_usage) a
chunk with empty choices and the usage, then `data: [DONE]`. Every content chunk also
carries a `speculative` object (not in OpenAI's schema; clients ignore unknown fields) so a
terminal can show live acceptance and tokens/s; `specchat chat --endpoint` reads it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from specchat.engine.events import Chunk, Finished
from specchat.engine.logprobs import TokenLogprob
from specchat.engine.stats import Stats
from specchat.llm.tools import CallStream, ToolCall, ToolSet, accepts, split_calls
from specchat.serve.errors import APIError
from specchat.serve.logprobs import LogprobTexts
from specchat.serve.schemas import (
    FINISH,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    Completion,
    Delta,
    FinishReason,
    FunctionCall,
    SpeculativeUsage,
    TextChoice,
    ToolCallDelta,
    ToolCallOut,
    Usage,
)

DONE = "data: [DONE]\n\n"


def event(body: BaseModel | dict[str, Any], keep: tuple[str, ...] = ()) -> str:
    data = body.model_dump() if isinstance(body, BaseModel) else body
    for choice in data.get("choices") or ():
        delta = choice.get("delta")
        if delta is not None:  # OpenAI sends only the fields a delta sets (and `keep`)
            choice["delta"] = {k: v for k, v in delta.items() if v is not None or k in keep}
    return "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def error_event(exc: APIError) -> str:
    """How OpenAI reports a failure after a stream has started (the client raises it)."""
    return event(exc.body())


def progress(stats: Stats) -> dict[str, Any]:
    return {"completion_tokens": stats.generated, **SpeculativeUsage.of(stats).model_dump()}


class Answer:
    """Builds one request's bodies: same id, creation time and model in every chunk.

    With tools, the answer's text is read for calls as it streams (llm/tools.py): text goes
    out as content, each call as one `delta.tool_calls` entry once it is whole, and the finish
    reason is "tool_calls" when there was one. With logprobs, each chunk carries its tokens'.
    """

    def __init__(self, model: str, chat: bool, tools: ToolSet | None = None,
                 token_bytes: Callable[[int], bytes] | None = None,
                 logprobs: bool = False) -> None:
        self.model = model
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        callable_ = tools.callable if chat and tools is not None else ()
        self.accept = accepts(callable_) if callable_ else None
        self.names = [t.name for t in callable_]
        self.calls = CallStream(self.accept, names=self.names) if callable_ else None
        self.n_calls = 0
        self.texts = LogprobTexts(token_bytes) if logprobs and token_bytes else None
        self.logprobs: list[TokenLogprob] = []  # not yet sent

    def whole(self, finished: Finished) -> dict[str, Any]:
        """The whole answer's body (a chat message has `tool_calls` only when it made some)."""
        body = self._whole(finished).model_dump()
        for choice in body["choices"]:
            message = choice.get("message")
            if message is not None and message.get("tool_calls") is None:
                del message["tool_calls"]
        return body

    def _whole(self, finished: Finished) -> BaseModel:
        usage = Usage.of(finished.stats)
        logprobs = self._logprobs()
        if not self.chat:
            return Completion(id=self.id, created=self.created, model=self.model,
                              choices=[TextChoice(text=finished.text, logprobs=logprobs,
                                                  finish_reason=FINISH[finished.reason])],
                              usage=usage)
        content: str | None = finished.text
        calls: list[ToolCallOut] | None = None
        if self.calls is not None:
            content, found = split_calls(finished.text, self.accept, names=self.names)
            calls = [ToolCallOut(id=c.id, function=FunctionCall(name=c.name,
                                                                arguments=c.arguments))
                     for c in found] or None
            content = content if content.strip() or not calls else None
        reason = self._reason(finished, bool(calls))
        return ChatCompletion(id=self.id, created=self.created, model=self.model,
                              choices=[ChatChoice(message=AssistantMessage(
                                  content=content, tool_calls=calls), logprobs=logprobs,
                                  finish_reason=reason)], usage=usage)

    def saw(self, chunk: Chunk) -> None:
        """Keep a chunk's logprobs for the whole answer (whole() sends them)."""
        self.logprobs.extend(chunk.logprobs)

    def first(self) -> str | None:
        """The role chunk that opens a chat stream (text completions have none); its content
        is null, as in llama-server's and the openai client's own tests."""
        if not self.chat:
            return None
        return event(self._chunk(Delta(role="assistant")), keep=("content",))

    def step(self, chunk: Chunk) -> list[str]:
        """The events for one engine chunk (none while text is held back)."""
        self.saw(chunk)
        if not chunk.text:
            return []
        parts: list[str | ToolCall] = [chunk.text]
        if self.calls is not None:
            parts = self.calls.push(chunk.text)
        return self._parts(parts, chunk.stats)

    def text(self, text: str, stats: Stats) -> str:
        """A chunk of text (and its tokens' logprobs); "" sends no content, only those."""
        body = self._chunk(Delta(content=text or None)) if self.chat else self._completion(text)
        data = body.model_dump()
        data["speculative"] = progress(stats)
        logprobs = self._logprobs()
        if logprobs is not None:
            data["choices"][0]["logprobs"] = logprobs
        return event(data)

    def finish(self, finished: Finished, include_usage: bool) -> list[str]:
        out = self._parts(self.calls.finish(), finished.stats) if self.calls else []
        if self.logprobs and self.texts is not None:  # tokens whose text was held back
            out.append(self.text("", finished.stats))
        reason = self._reason(finished, self.n_calls > 0)
        if self.chat:
            out.append(event(self._chunk(Delta(), reason)))
        else:
            out.append(event(self._completion("", reason)))
        if include_usage:
            usage = Usage.of(finished.stats)
            body = ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                       choices=[], usage=usage) if self.chat else \
                Completion(id=self.id, created=self.created, model=self.model, choices=[],
                           usage=usage)
            out.append(event(body))
        return out

    def _parts(self, parts: list[str | ToolCall], stats: Stats) -> list[str]:
        out = []
        for part in parts:
            if isinstance(part, ToolCall):
                delta = ToolCallDelta(index=self.n_calls, id=part.id, function=FunctionCall(
                    name=part.name, arguments=part.arguments))
                self.n_calls += 1
                out.append(event(self._chunk(Delta(tool_calls=[delta]))))
            elif part and not (self.n_calls and not part.strip()):
                out.append(self.text(part, stats))  # (whitespace between calls is dropped)
        return out

    def _logprobs(self) -> dict[str, Any] | None:
        if self.texts is None:
            return None
        items, self.logprobs = self.logprobs, []
        return self.texts.chat(items) if self.chat else self.texts.legacy(items)

    @staticmethod
    def _reason(finished: Finished, called: bool) -> FinishReason:
        return "tool_calls" if called and finished.reason in ("eog", "stop") else \
            FINISH[finished.reason]

    def _chunk(self, delta: Delta, reason: FinishReason | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                   choices=[ChunkChoice(delta=delta, finish_reason=reason)])

    def _completion(self, text: str, reason: FinishReason | None = None) -> Completion:
        return Completion(id=self.id, created=self.created, model=self.model,
                          choices=[TextChoice(text=text, finish_reason=reason)])
