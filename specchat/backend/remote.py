"""A remote OpenAI-compatible server as the chat's and ask's backend (`--endpoint URL`).

It keeps the Backend contract (base.py) like the local Runtime, without token ids and a
context size: those stay on the server, which enforces its own context and says so in an
error. Speed figures come from the server when it reports them
(specchat serve's usage.speculative and per-chunk `speculative`); otherwise tokens/s is
measured here from the streamed chunks, and the mode shows as "remote".
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

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


def base_url(endpoint: str) -> str:
    """`http://host:8080`, `.../v1` and `.../v1/` all mean the same API root."""
    url = endpoint.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--endpoint {endpoint!r}: give a URL like http://127.0.0.1:8080/v1")
    return url if url.endswith("/v1") else url + "/v1"


class RemoteRuntime(Backend):
    """The conversation goes to a server; everything else about the chat stays the same."""

    def __init__(self, endpoint: str, api_key: str | None, model: str | None,
                 options: GenerationOptions, timeout: float = 600.0,
                 http_client: Any = None) -> None:
        import openai

        self._openai = openai
        self.url = base_url(endpoint)
        # No retries: a retried chat request would be answered (and paid for) twice.
        self.client = openai.OpenAI(base_url=self.url, api_key=api_key or "none",
                                    timeout=timeout, max_retries=0, http_client=http_client)
        self.model = model or self._only_model()
        self._spec = options.spec  # the server decides how it speculates
        self.info = RuntimeInfo(target_name=self.model, target_path=self.url,
                                template_note="the server's own", endpoint=self.url,
                                notes=["answers come from a remote server; speculation "
                                       "happens there"])

    def _only_model(self) -> str:
        with self._errors():
            models = [m.id for m in self.client.models.list().data]
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
        request = dict(model=self.model, messages=list(messages), **self._fields(options))
        return self._events(lambda: self.client.chat.completions.create(**request),
                            lambda choice: choice.delta.content)

    def complete(self, prompt: str | Sequence[int], options: GenerationOptions,
                 progress: ProgressCallback | None = None) -> Events:
        text = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
        request = dict(model=self.model, prompt=text, **self._fields(options))
        return self._events(lambda: self.client.completions.create(**request),
                            lambda choice: choice.text)

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

    def _events(self, start: Any, text_of: Any) -> Events:
        begin = time.perf_counter()
        with self._errors():
            stream = start()
        live = _Live(begin)
        try:
            with self._errors():
                for chunk in stream:
                    if chunk.choices:
                        choice = chunk.choices[0]
                        text = live.saw(text_of(choice) or "",
                                        getattr(chunk, "model_extra", None) or {},
                                        choice.finish_reason)
                        if text:
                            yield Chunk(text, (), (), live.stats())
                    if chunk.usage is not None:
                        live.usage(chunk.usage)
        finally:
            stream.close()  # a closed generator (Ctrl-C) tells the server to stop
        tail = live.end()
        if tail:
            yield Chunk(tail, (), (), live.stats())
        yield Finished(REASONS.get(live.reason or "stop", "eog"), live.text, (), live.stats())

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
        self.reason: str | None = None
        self.server: dict[str, Any] = {}
        self.counts: dict[str, int] = {}
        self._held = ""  # trailing U+FFFD, shown only if the answer was not cut

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def saw(self, text: str, extra: dict[str, Any], reason: str | None) -> str:
        """Take in a streamed chunk; return the text to show now. A trailing U+FFFD waits:
        a server that cut the answer at max_tokens in the middle of a character sends one,
        and it is dropped then (end())."""
        now = time.perf_counter()
        if text:
            self.first = self.first or now
            self.chunks += 1
        pending = self._held + text
        shown = pending.rstrip("\ufffd")
        self._held = pending[len(shown):]
        if shown:
            self.parts.append(shown)
        if isinstance(extra.get("speculative"), dict):
            self.server = extra["speculative"]
        self.reason = reason or self.reason
        return shown

    def end(self) -> str:
        """What was held back, unless the answer was cut at max_tokens."""
        held, self._held = self._held, ""
        if not held or self.reason == "length":
            return ""
        self.parts.append(held)
        return held

    def usage(self, usage: Any) -> None:
        details = getattr(usage, "prompt_tokens_details", None)
        self.counts = {"prompt_tokens": int(usage.prompt_tokens or 0),
                       "completion_tokens": int(usage.completion_tokens or 0),
                       "prompt_cached": int(getattr(details, "cached_tokens", 0) or 0)}
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
            values: dict[str, Any] = {name: int(server.get(name) or 0) for name in _COUNTS}
            values.update({name: float(server.get(name) or 0.0) for name in _SECONDS})
            values["steps_empty"] = values["steps"] - values["steps_drafted"]
            return Stats(mode=f"{REMOTE} {server.get('mode', '')}".strip(),
                         generated=int(self.counts.get("completion_tokens")
                                       or server.get("completion_tokens", 0)),
                         **values, **common)
        generated = self.counts.get("completion_tokens") or self.chunks
        return Stats(mode=REMOTE, generated=generated, decode_seconds=now - first,
                     unknown=(*unknown, *SPECULATION), **common)


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
