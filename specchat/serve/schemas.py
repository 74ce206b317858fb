"""Request and response bodies of the OpenAI API subset specchat serves, as typed models.

Unknown request fields are ignored, as OpenAI clients expect, except those that would change
the answer and are not supported: those are a 400 naming them (params.py). A few
llama-server-style extension fields are honoured (`top_k`, `min_p`, `repeat_penalty`,
`repeat_last_n`, `json_schema`, `grammar`, `spec`, `draft_max`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specchat.engine.stats import Stats

FinishReason = Literal["stop", "length", "tool_calls"]
# The engine's reasons, in OpenAI's words: a full context cuts the answer like max_tokens.
FINISH: dict[str, FinishReason] = {"eog": "stop", "stop": "stop", "length": "length",
                                   "context": "length"}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool = False


class TextPart(_Lenient):
    type: str
    text: str | None = None


class ChatMessage(_Lenient):
    role: str
    content: str | list[TextPart] | None = None
    tool_calls: list[Any] | None = None  # an assistant's calls (checked in structured.py)
    tool_call_id: str | None = None  # a tool result: which call it answers
    name: str | None = None


class GenerationFields(_Lenient):
    """What chat and text completions share."""

    model: str | None = None  # this server serves one model: leaving it out means that one
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: Any = None  # {"token id": bias}; checked in structured.py
    response_format: Any = None  # checked in structured.py, for a 400 that says what is wrong
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    store: bool | None = None  # false: nothing of this request is kept (backend/clients.py)
    # specchat / llama-server extensions
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    spec: str | None = None
    draft_max: int | None = None
    json_schema: Any = None
    grammar: Any = None


class ChatRequest(GenerationFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: Any = None  # checked in structured.py
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    # Refused by name (params.py): the old function-calling fields and audio output.
    functions: Any = None
    function_call: Any = None
    audio: Any = None


class CompletionRequest(GenerationFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None  # the legacy API: how many alternatives per token
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None


class SpeculativeUsage(BaseModel):
    """What speculation did for this answer (counts from the engine's Stats)."""

    mode: str
    drafted: int
    accepted: int
    acceptance: float | None
    steps: int
    steps_drafted: int
    tokens_per_step: float
    tokens_per_second: float
    decode_seconds: float
    speedup_estimate: float | None
    plain_step_seconds: float
    draft_seconds: float
    verify_seconds: float
    sample_seconds: float
    # Per drafter (ngram, draft, store, grammar): steps, drafted and accepted tokens.
    sources: dict[str, dict[str, int]] = {}

    @classmethod
    def of(cls, stats: Stats) -> SpeculativeUsage:
        return cls(mode=stats.mode, drafted=stats.drafted, accepted=stats.accepted,
                   acceptance=stats.acceptance, steps=stats.steps,
                   steps_drafted=stats.steps_drafted,
                   tokens_per_step=stats.tokens_per_step,
                   tokens_per_second=stats.tokens_per_second,
                   decode_seconds=stats.decode_seconds,
                   speedup_estimate=stats.speedup_estimate,
                   plain_step_seconds=stats.plain_step_seconds,
                   draft_seconds=stats.draft_seconds, verify_seconds=stats.verify_seconds,
                   sample_seconds=stats.sample_seconds, sources=stats.to_dict()["sources"])


class PromptDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptDetails
    speculative: SpeculativeUsage

    @classmethod
    def of(cls, stats: Stats) -> Usage:
        return cls(prompt_tokens=stats.prompt_tokens, completion_tokens=stats.generated,
                   total_tokens=stats.prompt_tokens + stats.generated,
                   prompt_tokens_details=PromptDetails(cached_tokens=stats.prompt_cached),
                   speculative=SpeculativeUsage.of(stats))


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ToolCallDelta(ToolCallOut):
    index: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: dict[str, Any] | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: dict[str, Any] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class TextChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: FinishReason | None = None
    logprobs: dict[str, Any] | None = None


class Completion(BaseModel):
    """A text completion; streamed chunks have the same shape (OpenAI's legacy API)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "specchat"
    meta: dict[str, Any] = Field(default_factory=dict)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
