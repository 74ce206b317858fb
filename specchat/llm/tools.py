"""Tool calls in the Hermes format that Qwen2.5's chat templates define: the model writes

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(one block per call) and reads results back as `tool` messages. Templates that define tools
this way get them through the template itself; for any other template the tools are described
in the system message in the same format and the history is written out as text (`plain_
history`), so one grammar and one parser serve every model. Pure: no llama_cpp import.

`tool_choice` "required" and a named function are enforced by a grammar (`tool_lark`);
"auto" lets the model write text or calls, and a call, once begun, must match its function's
parameters; "none" leaves the tools out of the prompt altogether. With a response_format
under "auto", an answer is calls or JSON in that format, nothing else. Under "auto" small models
often write the call as a fenced JSON block instead (```json {"name": ..., "arguments": ...}
```); an answer that starts so, naming a declared tool, is read as a call too and held to
the same grammar (a block that names no declared tool stays text).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.llm.lark import JSON_WHITESPACE, json_lark

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FENCE = "```"
# Where a call is written: between the markers, or (under "auto") in a fenced JSON block.
MARKERS = ((OPEN, CLOSE), (FENCE, FENCE))
# The fenced form in Lark: an answer that opens a JSON fence with the name of a declared tool
# is a call of it (and held to its parameters); any other fenced JSON stays free text.
_WS = r"[ \t\n]*"
_FENCE = rf"{_WS}```(json)?{_WS}"
NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    strict: bool = False

    def as_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = dict(self.parameters)
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolSet:
    """The tools of one request and how they may be used: `choice` is "auto", "none",
    "required" or a function's name."""

    tools: tuple[Tool, ...]
    choice: str = "auto"
    parallel: bool = True

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if self.choice not in CHOICES and self.choice not in names:
            raise ValueError(f"tool_choice names {self.choice!r}, which is not among the tools")

    @property
    def offered(self) -> tuple[Tool, ...]:
        """The tools the model is told about (none for "none")."""
        return () if self.choice == "none" else self.tools

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools a call may name."""
        if self.choice in CHOICES:
            return self.offered
        return tuple(t for t in self.tools if t.name == self.choice)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it


def native(template_source: str) -> bool:
    """Whether a chat template renders `tools` and Hermes-style calls itself."""
    return "tools" in template_source and OPEN in template_source


def tool_lark(tools: ToolSet, open_token: int | None, close_token: int | None,
              answer: str | None = None) -> str | None:
    """The grammar of an answer under `tools` (None: no grammar, for "none").

    `open_token`/`close_token` are the ids of <tool_call> and </tool_call> when the model has
    them as special tokens (a grammar must name those as tokens); else the markers are text.
    `answer` (a Lark rule body, under "auto" only) is what an answer that calls no tool must
    be, a response_format's JSON; without it such an answer is free text.
    """
    callable_ = tools.callable
    if not callable_:
        return None
    many = tools.parallel and tools.choice in ("auto", "required")
    calls = 'calls: (call "\\n"?)+' if many else 'calls: call "\\n"?'
    closer = f"<[{close_token}]>" if close_token is not None else json.dumps(CLOSE)
    opener = f"<[{open_token}]>" if open_token is not None else json.dumps(OPEN)
    bodies = _bodies(callable_)
    if tools.choice != "auto":
        return "\n".join(["start: calls", calls, f'call: {opener} "\\n" body "\\n" {closer}',
                          *bodies])
    fenced, rules = _fenced(callable_, text=answer is None)
    if answer is not None:
        # Either a call (nothing before it) or the answer in its format.
        start = f"start: answer | calls\nanswer: {answer}"
        call = f'call: {opener} "\\n" body "\\n" {closer} | {fenced}'
    elif open_token is not None:
        # A special token never matches text: free text simply stops where a call begins.
        start = "start: TEXT? calls?"
        call = f'call: {opener} "\\n" body "\\n" {closer} | {fenced}'
    else:
        # Text markers: what comes before a call ends lazily, at the first marker.
        start = "start: TEXT | calls"
        call = f'call: head "\\n" body "\\n" {closer} | {fenced}\nhead[lazy]: /(?s:.*){OPEN}/'
    return "\n".join([start, calls, call, *bodies, *rules])


def _bodies(tools: Sequence[Tool]) -> list[str]:
    """The JSON of a call, one rule per tool: its head (up to the arguments) is one terminal
    and its arguments a JSON schema of their own, each tool's parameters a whole document, so
    that their local $refs ("#/$defs/Person", "#") point where their author meant."""
    ws = JSON_WHITESPACE
    rules = [f"body: {' | '.join(f'body_{i}' for i in range(len(tools)))}",
             f"BODY_END: /{ws}\\}}/"]
    for i, tool in enumerate(tools):
        rules += [f"body_{i}: BODY_{i} args_{i} BODY_END",
                  f'BODY_{i}: /\\{{{ws}"name"{ws}:{ws}"{re.escape(tool.name)}"{ws},{ws}'
                  f'"arguments"{ws}:{ws}/',
                  f"args_{i}: {json_lark(_parameters(tool), strict=tool.strict)}"]
    return rules


def _fenced(tools: Sequence[Tool], *, text: bool) -> tuple[str, list[str]]:
    """The fenced form of a call, one rule per tool (its arguments are `_bodies`' args_i):
    its head (the fence and the JSON up to the arguments) is one terminal, like TEXT (when
    `text`: free text may come instead of calls), so the lexer weighs both at every byte and
    free text gives way exactly where a declared tool's name closes."""
    names = "|".join(re.escape(t.name) for t in tools)
    head = rf'{_FENCE}\{{{_WS}"name"{_WS}:{_WS}"'
    rules = [f"FENCE_END: /{_WS}\\}}{_WS}```/"]
    if text:
        rules.append(f'TEXT: /(?s:.+)/ & ~/{head}({names})"(?s:.*)/')
    for i, tool in enumerate(tools):
        rules += [f"fenced_{i}: FENCED_{i} args_{i} FENCE_END",
                  f'FENCED_{i}: /{head}{re.escape(tool.name)}"{_WS},{_WS}"arguments"{_WS}:{_WS}/']
    return " | ".join(f"fenced_{i}" for i in range(len(tools))), rules


def _parameters(tool: Tool) -> Mapping[str, Any]:
    """The schema a call's arguments are held to: the declared parameters, where a function
    that lists its parameters takes no others (a function cannot take keyword arguments it
    does not declare; JSON schema would allow them when additionalProperties is not said)."""
    params = dict(tool.parameters or {"type": "object"})
    params.setdefault("type", "object")
    if "properties" in params:
        params.setdefault("additionalProperties", False)
    return params


def describe(tools: Sequence[Tool]) -> str:
    """The system text that offers `tools` to a model whose template has no tool format."""
    listed = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query. "
            f"The functions are described in JSON inside <tools></tools>:\n<tools>\n{listed}\n"
            "</tools>\n\nTo call a function, write a JSON object with its name and arguments "
            f"between {OPEN} and {CLOSE}, one call per block:\n{OPEN}\n"
            '{"name": <function-name>, "arguments": <arguments-json-object>}\n' + CLOSE)


def call_text(name: str, arguments: Any) -> str:
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}" \
           f"\n{CLOSE}"


def plain_history(messages: Sequence[Mapping[str, Any]],
                  tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The conversation for a template without tools: the tool description goes into the
    system message, calls become assistant text, results become a user message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = [call_text(name, args) for name, args in call_parts(message["tool_calls"])]
            out.append({"role": "assistant", "content": "\n".join(filter(None, [content,
                                                                                *calls]))})
        elif role == "tool":
            reply = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("tool_result"):
                out[-1]["content"] += "\n" + reply
            else:
                out.append({"role": "user", "content": reply, "tool_result": True})
        else:
            out.append({"role": role, "content": content})
    for message in out:
        message.pop("tool_result", None)
    if tools:
        note = describe(tools)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{note}" if out[0]["content"] else note
        else:
            out.insert(0, {"role": "system", "content": note})
    return out


def call_parts(calls: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, Any]]:
    """(name, arguments) of OpenAI tool_calls, arguments parsed from their JSON text (a
    template writes them as an object)."""
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                pass  # not JSON (or too deep to read): the template gets the text as sent
        yield str(function.get("name", "")), arguments


def native_history(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template that renders tool calls itself: arguments as objects."""
    out = []
    for message in messages:
        copy = dict(message)
        if copy.get("tool_calls"):
            copy["tool_calls"] = [
                {**dict(call), "function": {"name": name, "arguments": args}}
                for call, (name, args) in zip(copy["tool_calls"],
                                              call_parts(copy["tool_calls"]), strict=True)]
        out.append(copy)
    return out


# --- reading calls back out of an answer ------------------------------------------------------

def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def parse_call(body: str, make_id: Callable[[], str] = new_call_id) -> ToolCall | None:
    """One call from the JSON between the markers; None when it is not a call."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    return ToolCall(make_id(), data["name"], json.dumps(arguments, ensure_ascii=False))


class CallStream:
    """Feed an answer's text as it streams; get back text and whole calls, in order.

    Text that could be the start of a call is held back until it is clear; a call is handed
    out once its closing marker arrived. A block that is no call `accept` takes (a fenced
    code block, say) comes back as the text it was. A call that never closes (the answer was
    cut) is dropped at the end, markup and all: a <tool_call> block, the start of its marker,
    or a fenced block begun as a call of one of `names` (any name, when empty).
    """

    def __init__(self, accept: Callable[[ToolCall], bool] | None = None,
                 make_id: Callable[[], str] = new_call_id,
                 names: Collection[str] = ()) -> None:
        self.accept = accept
        self.make_id = make_id
        self.names = frozenset(names)
        self._buf = ""
        self._open: tuple[str, str] | None = None  # the markers of the block being read

    def push(self, text: str) -> list[str | ToolCall]:
        self._buf += text
        out: list[str | ToolCall] = []
        while True:
            if self._open is None:
                found = [(at, pair) for pair in MARKERS if (at := self._buf.find(pair[0])) >= 0]
                if not found:
                    keep = max(_partial_suffix(self._buf, opener) for opener, _ in MARKERS)
                    if len(self._buf) > keep:
                        out.append(self._buf[: len(self._buf) - keep])
                        self._buf = self._buf[len(self._buf) - keep:]
                    return out
                at, self._open = min(found)
                if at:
                    out.append(self._buf[:at])
                self._buf = self._buf[at:]
            opener, closer = self._open
            end = self._buf.find(closer, len(opener))
            if end < 0:
                return out
            out.append(self._call(self._buf[len(opener): end], opener) or
                       self._buf[: end + len(closer)])
            self._buf, self._open = self._buf[end + len(closer):], None

    def _call(self, body: str, opener: str) -> ToolCall | None:
        if opener == FENCE:
            body = body.removeprefix("json")
        call = parse_call(body.strip(), self.make_id)
        if call is None or (self.accept is not None and not self.accept(call)):
            return None
        return call

    def finish(self) -> list[str | ToolCall]:
        rest, opened = self._buf, self._open
        self._buf, self._open = "", None
        if opened is None and rest and OPEN.startswith(rest):
            return []  # the start of a marker
        if opened is not None and (opened[0] == OPEN or self._begun_call(rest[len(FENCE):])):
            return []
        return [rest] if rest else []

    def _begun_call(self, fenced: str) -> bool:
        """Whether a fenced block's text so far is a call's start: a name that is (or
        begins) a declared one, or the fence's JSON cut before its name."""
        begun = _BEGUN.match(fenced)
        if begun is None:
            compact = re.sub(r"[ \t\n]", "", fenced.removeprefix("json"))
            return compact.startswith("{") and '{"name":"'.startswith(compact)
        name, closed = begun.group(1), begun.group(2)
        if not self.names:
            return True
        return name in self.names if closed else any(n.startswith(name) for n in self.names)


# A fenced block's text once its call object has begun: the name so far, and its quote
# when the name is whole.
_BEGUN = re.compile(rf'(?:json)?{_WS}\{{{_WS}"name"{_WS}:{_WS}"([^"]*)(")?')


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def accepts(tools: Collection[Tool]) -> Callable[[ToolCall], bool]:
    """Whether a call names one of `tools` with arguments its parameters allow: what the
    grammar enforces, checked again for calls read from text it did not hold (a fenced block
    after some prose). The parameters were checked when the request came (llm/shapes.py):
    references stay inside them, patterns run on RE2, the work is bounded (llm/schemacheck)."""
    from specchat.llm import schemacheck  # jsonschema and RE2: only where tools are used

    parameters = {t.name: t.parameters for t in tools}
    validators: dict[str, Any] = {}  # built when a call names the tool (serve: off the loop)

    def accept(call: ToolCall) -> bool:
        if call.name not in parameters:
            return False
        if call.name not in validators:
            validators[call.name] = schemacheck.validator(dict(parameters[call.name]))
        return schemacheck.is_valid(validators[call.name], json.loads(call.arguments))
    return accept


def split_calls(text: str, accept: Callable[[ToolCall], bool] | None = None,
                make_id: Callable[[], str] = new_call_id,
                names: Collection[str] = ()) -> tuple[str, list[ToolCall]]:
    """A whole answer's text (without the calls, trimmed) and the calls `accept` takes."""
    stream = CallStream(accept, make_id, names)
    parts = stream.push(text) + stream.finish()
    calls = [p for p in parts if isinstance(p, ToolCall)]
    content = "".join(p for p in parts if isinstance(p, str))
    return (content.strip() if calls else content), calls
