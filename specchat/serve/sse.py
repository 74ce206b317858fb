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
from typing import Any

from pydantic import BaseModel

from specchat.engine.events import Finished
from specchat.engine.stats import Stats
from specchat.serve.errors import APIError
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
    SpeculativeUsage,
    TextChoice,
    Usage,
)

DONE = "data: [DONE]\n\n"


def event(body: BaseModel | dict[str, Any]) -> str:
    data = body.model_dump() if isinstance(body, BaseModel) else body
    for choice in data.get("choices") or ():
        delta = choice.get("delta")
        if delta is not None:  # OpenAI sends only the fields a delta sets
            choice["delta"] = {k: v for k, v in delta.items() if v is not None}
    return "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def error_event(exc: APIError) -> str:
    """How OpenAI reports a failure after a stream has started (the client raises it)."""
    return event(exc.body())


def progress(stats: Stats) -> dict[str, Any]:
    return {"completion_tokens": stats.generated, **SpeculativeUsage.of(stats).model_dump()}


class Answer:
    """Builds one request's bodies: same id, creation time and model in every chunk."""

    def __init__(self, model: str, chat: bool) -> None:
        self.model = model
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def whole(self, finished: Finished) -> BaseModel:
        reason = FINISH[finished.reason]
        usage = Usage.of(finished.stats)
        if self.chat:
            return ChatCompletion(id=self.id, created=self.created, model=self.model,
                                  choices=[ChatChoice(message=AssistantMessage(
                                      content=finished.text), finish_reason=reason)],
                                  usage=usage)
        return Completion(id=self.id, created=self.created, model=self.model,
                          choices=[TextChoice(text=finished.text, finish_reason=reason)],
                          usage=usage)

    def first(self) -> str | None:
        """The role chunk that opens a chat stream (text completions have none)."""
        if not self.chat:
            return None
        return event(self._chunk(Delta(role="assistant", content="")))

    def text(self, text: str, stats: Stats) -> str:
        body = self._chunk(Delta(content=text)) if self.chat else self._completion(text)
        data = body.model_dump()
        data["speculative"] = progress(stats)
        return event(data)

    def finish(self, finished: Finished, include_usage: bool) -> list[str]:
        reason = FINISH[finished.reason]
        if self.chat:
            out = [event(self._chunk(Delta(), reason))]
        else:
            out = [event(self._completion("", reason))]
        if include_usage:
            usage = Usage.of(finished.stats)
            body = ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                       choices=[], usage=usage) if self.chat else \
                Completion(id=self.id, created=self.created, model=self.model, choices=[],
                           usage=usage)
            out.append(event(body))
        return out

    def _chunk(self, delta: Delta, reason: FinishReason | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                   choices=[ChunkChoice(delta=delta, finish_reason=reason)])

    def _completion(self, text: str, reason: FinishReason | None = None) -> Completion:
        return Completion(id=self.id, created=self.created, model=self.model,
                          choices=[TextChoice(text=text, finish_reason=reason)])
