"""A request's messages and sampling fields -> what the engine takes, or a 400 saying why.

Request values override the server's own options (its flags, environment and config file),
which are checked by the same schema (specchat/settings/schema.py) as every command-line flag.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from specchat.backend.base import Message
from specchat.engine.options import GenerationOptions
from specchat.errors import UsageError
from specchat.llm.tools import ToolSet
from specchat.serve.errors import bad_request
from specchat.serve.schemas import ChatRequest, CompletionRequest, GenerationFields
from specchat.serve.structured import (
    logit_bias_of,
    structure_from_request,
    tool_messages,
    toolset_from_request,
)
from specchat.settings.schema import BY_NAME, OptionError, generation_options

Body = TypeVar("Body", bound=BaseModel)
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}
# Fields that would change the answer and are not supported: a 400 naming each, never
# silently ignored (README: "What specchat serve does not do"). Value: why, and what to do.
REFUSED = {
    "echo": "specchat serve does not echo the prompt back; prepend it yourself",
    "suffix": "insertion (fill-in-the-middle) is not supported; send the prefix as the prompt",
    "functions": "the old function-calling API is not supported; send the same functions as "
                 "tools (type \"function\")",
    "function_call": "the old function-calling API is not supported; use tool_choice",
    "audio": "audio output is not supported",
}
# Request field -> option name; everything else in the body is ignored or checked below.
OVERRIDES = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "repeat_penalty",
             "repeat_last_n", "spec", "draft_max")


async def parse_body(request: Request, model: type[Body]) -> Body:
    """The JSON body as `model` (guard.py has checked it is application/json and not too
    big); malformed JSON, NaN or Infinity, nesting too deep for Python, a string with a lone
    surrogate, or a missing or mistyped field is a 400 naming it."""
    raw = await request.body()
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON ({exc}): send a JSON object "
                          "like {\"model\": ..., \"messages\": [...]}") from None
    except RecursionError:
        raise bad_request("the request body nests too deeply to be read") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    where = _lone_surrogate(data)
    if where is not None:
        raise bad_request(f"{where} holds an unpaired UTF-16 surrogate (a \\ud800-\\udfff "
                          "escape without its pair): it is not text", param=where)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or None
        if first.get("type") == "missing":
            raise bad_request(f"missing required field {field!r}", param=field) from None
        raise bad_request(f"{field}: {first.get('msg', 'invalid value')}",
                          param=field) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _lone_surrogate(data: Any) -> str | None:
    """Where the parsed body has a string that is not valid Unicode text, or None.

    json.loads turns "\\ud800" into a lone surrogate that fails later, far from here, when
    it is encoded; a walk over the (already depth-limited) body finds it first.
    """
    stack: list[tuple[str, Any]] = [("body", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                stack.append((f"{where}.{key}" if where != "body" else str(key), item))
                stack.append((where, key))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return where
    return None


def chat_messages(request: ChatRequest, system: str | None) -> list[Message]:
    """Plain {"role", "content"} messages, exactly as `specchat ask` builds them.

    The server's --system prompt goes first when the request brings no system message.
    """
    out: list[Message] = []
    for i, message in enumerate(request.messages):
        role = ROLES.get(message.role)
        if role is None:
            raise bad_request(f"messages[{i}].role {message.role!r} is not supported: use "
                              "system, user, assistant or tool", param=f"messages[{i}].role")
        entry: Message = {"role": role, "content": _content(message.content, i)}
        entry.update(tool_messages(message, i))
        if role == "assistant" and entry.get("tool_calls") and message.content is None:
            entry["content"] = None  # a turn of calls only
        out.append(entry)
    if system and not any(m["role"] == "system" for m in out):
        out.insert(0, {"role": "system", "content": system})
    return out


def _content(content: Any, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise bad_request(f"messages[{index}] has a {part.type!r} content part: only "
                              "text parts are supported", param=f"messages[{index}].content")
        texts.append(part.text)
    return "\n".join(texts)


def completion_text(request: CompletionRequest) -> str | list[int]:
    """The prompt: text, or token ids ([1, 2, 3], or one such list in a list)."""
    prompt: Any = request.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise bad_request(f"prompt is a list of {len(prompt)} prompts: send one prompt "
                              "per request", param="prompt")
        prompt = prompt[0]
    if not prompt:
        raise bad_request("prompt is empty", param="prompt")
    return prompt


def request_tools(request: ChatRequest) -> ToolSet | None:
    return toolset_from_request(request.tools, request.tool_choice, request.parallel_tool_calls)


def request_options(request: GenerationFields, defaults: Mapping[str, Any]
                    ) -> GenerationOptions:
    """The server's options with the request's fields on top, each checked by the schema."""
    _refuse_unsupported(request)
    values = dict(defaults)
    given = {name: getattr(request, name) for name in OVERRIDES}
    max_tokens = getattr(request, "max_completion_tokens", None) or request.max_tokens
    given["max_tokens"] = max_tokens
    if request.top_p == 0:  # OpenAI's range is 0-1, and 0 keeps only the likeliest token
        given["top_p"], given["temperature"] = None, 0.0
    for name, value in given.items():
        if value is None:
            continue
        try:
            values[name] = BY_NAME[name].validate(value)
        except OptionError as exc:
            raise bad_request(str(exc), param=name) from None
    try:
        options = generation_options(values)
    except UsageError as exc:
        raise bad_request(str(exc).removeprefix("invalid option: ")) from None
    structure = structure_from_request(request.response_format, request.json_schema,
                                       request.grammar)
    return options.with_values(
        structure=structure or (None if _shapes(request) else options.structure),
        logit_bias=logit_bias_of(request.logit_bias), logprobs=_logprobs(request))


def _shapes(request: GenerationFields) -> bool:
    """Whether the request says what shape its answer takes (so the server's own --format
    or --schema does not apply): a response_format, or tools."""
    return request.response_format is not None or bool(getattr(request, "tools", None))


def _logprobs(request: GenerationFields) -> int | None:
    """How many alternatives per token to report; None when logprobs are not asked for."""
    if isinstance(request, ChatRequest):
        top = request.top_logprobs
        if top is not None and not 0 <= top <= 20:
            raise bad_request("top_logprobs must be from 0 to 20", param="top_logprobs")
        if not request.logprobs:
            if top:
                raise bad_request("top_logprobs needs logprobs: true", param="top_logprobs")
            return None
        return top or 0
    count = getattr(request, "logprobs", None)
    if count is not None and not 0 <= count <= 20:
        raise bad_request("logprobs must be from 0 to 20", param="logprobs")
    return count


def _refuse_unsupported(request: GenerationFields) -> None:
    if request.n not in (None, 1):
        raise bad_request(f"n={request.n}: specchat serve returns one choice per request; "
                          "send n=1 (or leave it out) and make separate requests", param="n")
    if getattr(request, "best_of", None) not in (None, 1):
        raise bad_request("best_of: specchat serve returns one completion per request; send "
                          "best_of=1 (or leave it out)", param="best_of")
    for name, why in REFUSED.items():
        if getattr(request, name, None) not in (None, False, ""):
            raise bad_request(f"{name}: {why}", param=name)
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(request, name)
        if value:
            raise bad_request(
                f"{name}={value}: specchat's sampler has no presence or frequency penalty; "
                "send 0 (or leave it out), or use its repeat_penalty (for example "
                "repeat_penalty=1.1) instead", param=name)
