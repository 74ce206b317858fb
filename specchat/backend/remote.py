"""A remote OpenAI-compatible server as the chat's and ask's backend (`--endpoint URL`).

It keeps the Backend contract (base.py) like the local Runtime, without token ids and a
context size: those stay on the server, which enforces its own context and says so in an
error. Speed figures come from the server when it reports them
(specchat serve's usage.speculative and per-chunk `speculative`); otherwise tokens/s is
measured here from the streamed chunks, and the mode shows as "remote".

What the server sends is not trusted (docs/security.md): the answer must be an event stream
(sse.py bounds each event), end with a finish reason or `[DONE]`, and stop at -n whether or not
the server honours max_tokens; the connection has a timeout (--timeout) between any two
parts of the answer; a redirect to another host is refused, so the conversation and the key
go only to --endpoint.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from specchat.backend import sse
from specchat.backend.base import (
    Backend,
    Events,
    Message,
    ProgressCallback,
    RuntimeInfo,
)
from specchat.engine.events import Chunk, Finished
from specchat.engine.options import GenerationOptions, Structure
from specchat.engine.stats import SPECULATION, Stats
from specchat.errors import SpecchatError, UsageError
from specchat.llm.tools import ToolSet

REMOTE = "remote"
# OpenAI's finish reasons in the engine's words ("stop" covers both a stop string and the
# model ending its answer; the common case is the latter).
REASONS = {"stop": "eog", "length": "length", "content_filter": "stop"}
CONNECT_TIMEOUT_S = 10.0  # the most --timeout allows for connecting
# More text per token than any vocabulary holds: an answer longer than max_tokens times this
# comes from a server that ignores max_tokens.
MAX_TOKEN_CHARS = 1024


def base_url(endpoint: str) -> str:
    """`http://host:8080`, `.../v1` and `.../v1/` all mean the same API root."""
    url = endpoint.strip().rstrip("/")
    hint = "give a URL like http://127.0.0.1:8080/v1"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parses the port: "http://h:x" raises here
    except ValueError as exc:
        raise UsageError(f"--endpoint {endpoint!r} is not a valid URL ({exc}): {hint}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--endpoint {endpoint!r}: {hint}")
    return url if url.endswith("/v1") else url + "/v1"


class RedirectRefused(Exception):
    """The server redirected a request to another host: not followed."""


def _same_origin_only(url: str) -> Callable[[Any], None]:
    """An httpx request hook: redirects within --endpoint's own scheme, host and port are
    followed, anything else is refused (the body is the conversation, the header the key)."""
    home = urlsplit(url)
    origin = (home.scheme, home.hostname, home.port)

    def check(request: Any) -> None:
        there = urlsplit(str(request.url))
        if (there.scheme, there.hostname, there.port) != origin:
            raise RedirectRefused(f"{url} redirected to {str(request.url)[:200]!r}, another "
                                  "host: not followed, so the conversation goes nowhere else; "
                                  "give that server as --endpoint if you trust it")
    return check


class RemoteRuntime(Backend):
    """The conversation goes to a server; everything else about the chat stays the same."""

    def __init__(self, endpoint: str, api_key: str | None, model: str | None,
                 options: GenerationOptions, timeout: float = 120.0,
                 http_client: Any = None) -> None:
        import openai

        self._openai = openai
        self.url = base_url(endpoint)
        self.timeout = timeout
        if http_client is None:
            http_client = openai.DefaultHttpxClient(
                follow_redirects=True, event_hooks={"request": [_same_origin_only(self.url)]})
        # No retries: a retried chat request would be answered (and paid for) twice. The read
        # timeout is the longest silence between two parts of the answer.
        self.client = openai.OpenAI(
            base_url=self.url, api_key=api_key or "none", max_retries=0,
            timeout=openai.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
            http_client=http_client)
        self.model = model or self._only_model()
        self._spec = options.spec  # the server decides how it speculates
        self.info = RuntimeInfo(target_name=self.model, target_path=self.url,
                                template_note="the server's own", endpoint=self.url,
                                notes=["answers come from a remote server; speculation "
                                       "happens there"])

    def _only_model(self) -> str:
        with self._errors():
            listing = self.client.models.list()
        try:
            models = [m.id for m in listing.data if isinstance(m.id, str) and m.id]
        except (AttributeError, TypeError) as exc:
            raise SpecchatError(f"{self.url}/models did not list models ({exc}): give one with "
                                "--model, or check --endpoint") from None
        if not models:
            raise SpecchatError(f"{self.url} serves no models: give one with --model")
        return models[0]

    # --- Backend ------------------------------------------------------------------------
    @property
    def n_ctx(self) -> None:
        return None  # the server enforces its own context (and says so)

    def answer(self, messages: Sequence[Message], options: GenerationOptions,
               progress: ProgressCallback | None = None, tools: ToolSet | None = None
               ) -> Events:
        if tools is not None:
            raise UsageError("tools are not passed on to --endpoint servers here: call the "
                             "server's API directly")
        # The server reads the prompt: there is no local prefill to report on.
        from openai.types.chat import ChatCompletionChunk

        request = dict(model=self.model, messages=list(messages), **self._fields(options))
        calls = self.client.chat.completions.with_streaming_response
        return self._events(lambda: calls.create(**request), ChatCompletionChunk,
                            lambda choice: choice.delta.content, options.max_tokens)

    def complete(self, prompt: str | Sequence[int], options: GenerationOptions,
                 progress: ProgressCallback | None = None) -> Events:
        from openai.types import Completion

        text = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
        request = dict(model=self.model, prompt=text, **self._fields(options))
        calls = self.client.completions.with_streaming_response
        return self._events(lambda: calls.create(**request), Completion,
                            lambda choice: choice.text, options.max_tokens)

    def effective_options(self, options: GenerationOptions) -> GenerationOptions:
        if options.spec != self._spec:
            raise UsageError("the speculation mode of a remote endpoint is the server's to "
                             "choose (specchat serve: its --spec)")
        return options

    def stats_lines(self, options: GenerationOptions) -> list[str]:
        return [f"remote      {self.model} at {self.url}"]

    def close(self) -> None:
        self.client.close()

    # --- the request and the stream -----------------------------------------------------
    @staticmethod
    def _fields(options: GenerationOptions) -> dict[str, Any]:
        """OpenAI fields, and every other sampler setting too, "off" values included: a
        server fills what it is not sent with its own defaults (llama-cpp-python's server:
        top_k 40, min_p 0.05, repeat_penalty 1.1), which would change even a temperature-0
        answer. Servers that do not know a field ignore it (llama-server, vLLM and
        llama-cpp-python's server all do)."""
        s = options.sampling
        fields: dict[str, Any] = {"max_tokens": options.max_tokens, "temperature":
                                  s.temperature, "top_p": s.top_p, "stream": True,
                                  "stream_options": {"include_usage": True}}
        if s.seed is not None:
            fields["seed"] = s.seed
        if options.stop:
            fields["stop"] = list(options.stop)
        if s.logit_bias:
            fields["logit_bias"] = {str(t): b for t, b in s.logit_bias}
        if options.structure is not None:
            fields["response_format"] = _response_format(options.structure)
        # llama-server's and vLLM's names for the same penalty; llama.cpp's window.
        extra: dict[str, Any] = {"top_k": s.top_k, "min_p": s.min_p,
                                 "repeat_penalty": s.repeat_penalty,
                                 "repetition_penalty": s.repeat_penalty,
                                 "repeat_last_n": s.repeat_last_n}
        if options.structure is not None and options.structure.kind == "grammar":
            extra["grammar"] = options.structure.text  # llama-server's own field
        fields["extra_body"] = extra
        return fields

    def _events(self, start: Any, kind: Any, text_of: Any, max_tokens: int) -> Events:
        """The answer's chunks and its end, read from the raw event stream (sse.py)."""
        live = _Live(time.perf_counter())
        complete = False
        with contextlib.ExitStack() as stack:  # closing it (Ctrl-C) tells the server to stop
            with self._errors():
                http = stack.enter_context(start()).http_response
            self._check_stream(http)
            for event in sse.events(self._bytes(http), self.url):
                if event is sse.DONE:
                    complete = True
                    break
                # A trailing U+FFFD waits: a server that cut the answer at max_tokens in the
                # middle of a character sends one, and it is dropped then (_Live.end).
                text = live.hold(self._take(event, kind, text_of, live))
                if text and live.past(max_tokens, text):
                    live.reason = "length"  # the server ignores max_tokens: -n holds anyway
                    break
                if text:
                    live.saw_text(text)
                    yield Chunk(text, (), (), live.stats())
        if not complete and live.reason is None:
            raise SpecchatError(f"the answer from {self.url} was cut off before it finished "
                                "(no finish reason, no [DONE]); what arrived is shown above")
        tail = live.end()
        if tail:
            live.saw_text(tail)
            yield Chunk(tail, (), (), live.stats())
        yield Finished(REASONS.get(live.reason or "stop", "eog"), live.text, (), live.stats())

    def _check_stream(self, http: Any) -> None:
        kind = http.headers.get("content-type", "")
        if kind.split(";")[0].strip().lower() != "text/event-stream":
            raise SpecchatError(f"{self.url} answered with {kind[:80] or 'no content type'!r} "
                                "instead of an event stream: is --endpoint the /v1 root of an "
                                "OpenAI-compatible API?")

    def _bytes(self, http: Any) -> Iterator[bytes]:
        """The body as it arrives; whatever the HTTP library raises becomes one line."""
        try:
            yield from http.iter_bytes()
        except Exception as exc:  # noqa: BLE001 - httpx or httpx2, depending on openai's version
            if "timeout" in type(exc).__name__.lower():
                raise SpecchatError(f"{self.url} sent nothing for {self.timeout:g} s in the "
                                    "middle of an answer; gave up (raise --timeout for a slow "
                                    "server)") from None
            raise SpecchatError(f"the answer from {self.url} broke off "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from None

    def _take(self, event: dict[str, Any], kind: Any, text_of: Any, live: _Live) -> str:
        """One event's text (its finish reason, usage and figures go to `live`)."""
        try:
            chunk = kind.construct(**event)
            text, reason, extra = "", None, chunk.model_extra or {}
            if chunk.choices:
                choice = chunk.choices[0]
                text, reason = text_of(choice) or "", choice.finish_reason
            if not isinstance(text, str) or not isinstance(reason, str | None) or \
                    not isinstance(extra, dict):
                raise TypeError("a field of the wrong type")
            if chunk.usage is not None:
                live.usage(chunk.usage)
        except (AttributeError, TypeError, IndexError, KeyError, ValueError) as exc:
            raise SpecchatError(f"{self.url} sent a malformed event ({exc}); is --endpoint an "
                                "OpenAI-compatible server?") from None
        live.saw(extra, reason)
        return text

    def _errors(self) -> Any:
        return _Translate(self._openai, self.url)


def _response_format(structure: Structure) -> dict[str, Any]:
    """OpenAI's response_format for a Structure (a grammar goes as llama-server's field)."""
    if structure.kind == "json_schema":
        return {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": json.loads(structure.text), "strict": structure.strict}}
    return {"type": "json_object"} if structure.kind == "json" else {"type": "text"}


# What specchat serve reports of its engine's Stats (usage.speculative).
_COUNTS = ("steps", "steps_drafted", "drafted", "accepted")
_SECONDS = ("decode_seconds", "draft_seconds", "verify_seconds", "sample_seconds",
            "plain_step_seconds")


class _Live:
    """Figures of the answer being streamed: the server's when it sends them, else ours."""

    def __init__(self, begin: float) -> None:
        self.begin = begin
        self.first: float | None = None
        self.parts: list[str] = []
        self.chunks = 0
        self.chars = 0
        self.reason: str | None = None
        self.server: dict[str, Any] = {}
        self.counts: dict[str, int] = {}
        self._held = ""  # trailing U+FFFD, shown only if the answer was not cut

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def saw(self, extra: dict[str, Any], reason: str | None) -> None:
        if isinstance(extra.get("speculative"), dict):
            self.server = extra["speculative"]
        self.reason = reason or self.reason

    def hold(self, text: str) -> str:
        """`text` less any U+FFFD at its end, which waits for what comes next (end())."""
        pending = self._held + text
        shown = pending.rstrip("\ufffd")
        self._held = pending[len(shown):]
        return shown

    def end(self) -> str:
        """What was held back, unless the answer was cut at max_tokens."""
        held, self._held = self._held, ""
        return "" if self.reason == "length" else held

    def saw_text(self, text: str) -> None:
        self.first = self.first or time.perf_counter()
        self.parts.append(text)
        self.chunks += 1
        self.chars += len(text)

    def past(self, max_tokens: int, text: str) -> bool:
        """Whether `text` would take the answer past max_tokens: every chunk holds at least
        one token, and no token is MAX_TOKEN_CHARS long."""
        return (self.chunks >= max_tokens
                or self.chars + len(text) > max_tokens * MAX_TOKEN_CHARS)

    def usage(self, usage: Any) -> None:
        details = getattr(usage, "prompt_tokens_details", None)
        self.counts = {"prompt_tokens": _count(usage.prompt_tokens),
                       "completion_tokens": _count(usage.completion_tokens),
                       "prompt_cached": _count(getattr(details, "cached_tokens", 0))}
        spec = (getattr(usage, "model_extra", None) or {}).get("speculative")
        if isinstance(spec, dict):
            self.server = spec

    def stats(self) -> Stats:
        now = time.perf_counter()
        first = self.first or now
        # What the server did not report is unknown, not 0 (Stats.unknown).
        unknown = () if self.counts else ("prompt_tokens", "prompt_cached")
        common: dict[str, Any] = {"prompt_tokens": self.counts.get("prompt_tokens", 0),
                                  "prompt_cached": self.counts.get("prompt_cached", 0),
                                  "prompt_seconds": first - self.begin}
        server = self.server
        if server:
            common["unknown"] = unknown
            values: dict[str, Any] = {name: _count(server.get(name)) for name in _COUNTS}
            values.update({name: _seconds(server.get(name)) for name in _SECONDS})
            values["steps_empty"] = max(0, values["steps"] - values["steps_drafted"])
            return Stats(mode=f"{REMOTE} {str(server.get('mode', ''))[:20]}".strip(),
                         generated=self.counts.get("completion_tokens")
                         or _count(server.get("completion_tokens")), **values, **common)
        generated = self.counts.get("completion_tokens") or self.chunks
        return Stats(mode=REMOTE, generated=generated, decode_seconds=now - first,
                     unknown=(*unknown, *SPECULATION), **common)


def _count(value: Any) -> int:
    """A count the server reported, or 0 for anything that is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2**53:
        return 0
    return int(value)


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not 0 <= value < 1e9:  # NaN fails both comparisons
        return 0.0
    return float(value)


class _Translate:
    """The openai client's exceptions as one-line specchat errors naming the server."""

    def __init__(self, openai: Any, url: str) -> None:
        self.openai = openai
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if exc is None or not isinstance(exc, self.openai.OpenAIError):
            return  # not ours: it goes on as it is
        if isinstance(exc.__cause__, RedirectRefused):
            raise SpecchatError(str(exc.__cause__)) from None
        if isinstance(exc, self.openai.APITimeoutError):
            raise SpecchatError(f"{self.url} did not answer in time (--timeout); is the server "
                                "running and not overloaded?") from None
        if isinstance(exc, self.openai.APIConnectionError):
            raise SpecchatError(f"cannot reach {self.url} ({exc.__cause__ or exc}): is the "
                                "server running, and is --endpoint right?") from None
        if isinstance(exc, self.openai.APIStatusError):
            message = _server_message(exc)
            raise SpecchatError(f"{self.url} answered {exc.status_code}: {message}") from None
        raise SpecchatError(f"{self.url}: {exc}") from None


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(exc, "message", exc))
