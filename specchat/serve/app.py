"""The FastAPI application: routes, API-key check, and one access-log line per request.

Handlers run on the event loop and never touch the models: they validate the request, hand a
Job to the Worker thread and relay its events (whole, or as server-sent events).
"""

from __future__ import annotations

import asyncio
import hmac
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from specchat.backend.clients import EVERYONE, Client, client_name
from specchat.engine.events import Chunk, Finished
from specchat.llm.tools import ToolSet
from specchat.serve import errors
from specchat.serve.errors import APIError
from specchat.serve.guard import Guard, Policy
from specchat.serve.params import (
    chat_messages,
    completion_text,
    parse_body,
    request_options,
    request_tools,
)
from specchat.serve.schemas import (
    ChatRequest,
    CompletionRequest,
    GenerationFields,
    ModelCard,
    ModelList,
)
from specchat.serve.sse import DONE, Answer, error_event
from specchat.serve.worker import READY, Done, Job, Worker

T = TypeVar("T")
CLIENT_GONE = 499  # nginx's code for "the client closed the connection"


@dataclass
class ServeConfig:
    """What the app needs besides the worker: names, key, and the request defaults."""

    model: str  # the id clients send (the -m value as given)
    defaults: Mapping[str, Any]  # generation option values a request may override
    system: str | None = None
    api_key: str | None = None
    more_keys: tuple[str, ...] = ()  # from --api-key-file: each key is a client of its own
    aliases: set[str] = field(default_factory=set)
    created: int = field(default_factory=lambda: int(time.time()))
    guard: Policy = field(default_factory=Policy)  # hosts, origins, body size, read timeout
    max_messages: int = 4096
    # Refuse a model name other than `model` and its aliases (404); by default any name is
    # this model, as llama-server does: clients with a hard-coded name work unconfigured.
    strict_model: bool = False

    def accepts(self, name: str) -> bool:
        return not self.strict_model or name == self.model or name in self.aliases

    @property
    def keys(self) -> tuple[str, ...]:
        """Every API key a client may send (none: the server is open to anyone)."""
        return ((self.api_key,) if self.api_key else ()) + self.more_keys


def model_aliases(model: str) -> set[str]:
    """Names a client may use for the -m value: itself, its file name with and without .gguf."""
    return {model, Path(model).name, Path(model).stem}


def create_app(worker: Worker, config: ServeConfig) -> FastAPI:
    app = FastAPI(title="specchat", docs_url=None, redoc_url=None, openapi_url=None)
    errors.install(app)
    app.add_middleware(Guard, policy=config.guard)  # inside the log: refusals are logged too
    app.add_middleware(AccessLog)

    guarded = [Depends(_authorizer(config.keys))]

    @app.get("/health")
    async def health() -> JSONResponse:
        ready = worker.state == READY
        body: dict[str, Any] = {"status": "ok" if ready else worker.state}
        if worker.error:
            body["error"] = worker.error
        return JSONResponse(body, status_code=200 if ready else 503)

    # Each route also without /v1, as llama-server serves them: clients given a base URL
    # without /v1 call those.
    @app.get("/v1/models", dependencies=guarded)
    @app.get("/models", dependencies=guarded, include_in_schema=False)
    async def models() -> ModelList:
        meta: dict[str, Any] = {"spec": config.defaults.get("spec"),
                                # Whether a request naming another model is answered by
                                # this one (--strict-model: a 404).
                                "any_model_name": not config.strict_model}
        if worker.runtime is not None:
            meta["draft"] = worker.runtime.info.draft_name
            meta["n_ctx"] = worker.runtime.n_ctx
        return ModelList(data=[ModelCard(id=config.model, created=config.created, meta=meta)])

    @app.post("/v1/chat/completions", dependencies=guarded)
    @app.post("/chat/completions", dependencies=guarded, include_in_schema=False)
    async def chat(request: Request) -> Response:
        body = await parse_body(request, ChatRequest)
        _check_model(config, body.model)
        if len(body.messages) > config.max_messages:
            raise APIError(413, f"the request has {len(body.messages)} messages; this server "
                           f"takes at most {config.max_messages} (--max-messages): send fewer",
                           param="messages", code="too_many_messages")
        # Checking the messages and tools (their schemas: llm/schemacheck.py) is bounded
        # work, done on a worker thread so that /health and other clients are answered.
        messages, tools = await run_in_threadpool(
            lambda: (chat_messages(body, config.system), request_tools(body)))
        return await _answer(worker, config, body, messages, request, chat=True,
                             tools=tools)

    @app.post("/v1/completions", dependencies=guarded)
    @app.post("/completions", dependencies=guarded, include_in_schema=False)
    async def completions(request: Request) -> Response:
        body = await parse_body(request, CompletionRequest)
        _check_model(config, body.model)
        return await _answer(worker, config, body, completion_text(body), request, chat=False)

    return app


def _authorizer(keys: Sequence[str]) -> Callable[[Request], Awaitable[None]]:
    """The dependency every route but /health has: with --api-key, a request must send one
    of the keys, and the one it sent names its client (stores and statistics are per client)."""

    async def authorized(request: Request) -> None:
        if not keys:
            return
        given = request.headers.get("authorization", "")
        scheme, _, key = given.partition(" ")
        if not given:
            raise APIError(401, "missing API key: send 'Authorization: Bearer KEY' with the "
                           "key this server was started with (--api-key)",
                           code="invalid_api_key")
        sent = key.strip().encode()
        # Every key is compared, so the time taken does not say which one came close.
        matches = [hmac.compare_digest(sent, k.encode()) for k in keys]
        if scheme.lower() != "bearer" or not any(matches):
            raise APIError(401, "wrong API key: send the key this server was started with "
                           "(--api-key) as 'Authorization: Bearer KEY'", code="invalid_api_key")
        request.state.client = client_name(keys[matches.index(True)])

    return authorized


def _check_model(config: ServeConfig, name: str | None) -> None:
    if name is not None and not config.accepts(name):
        raise APIError(404, f"model {name!r} is not served here: this server serves "
                       f"{config.model!r} (GET /v1/models lists it); send model="
                       f"{config.model!r}", param="model", code="model_not_found")


async def _answer(worker: Worker, config: ServeConfig, body: GenerationFields,
                  prompt: Any, request: Request, *, chat: bool,
                  tools: ToolSet | None = None) -> Response:
    options = await run_in_threadpool(request_options, body, config.defaults)
    # Whose store this answer drafts from, and whether it may be kept ("store": false).
    client = Client(getattr(request.state, "client", EVERYONE), keep=body.store is not False)
    job = Job(prompt, options, asyncio.get_running_loop(), tools=tools, client=client)
    worker.submit(job)
    # Until a response starts, a task listens for the client leaving: the events of a long
    # answer arrive without pause, so polling between them would never see it.
    watcher = asyncio.create_task(_watch_disconnect(request, job))

    async def gone() -> bool:
        return job.cancelled.is_set()

    try:
        first = await job.next(gone)
        if isinstance(first, APIError):
            raise first
        if isinstance(first, Done) and job.cancelled.is_set():
            return _gone(request)  # it left before anything was written (in the prefill)
        runtime = worker.runtime
        answer = Answer(body.model or config.model, chat, tools,
                        logprobs=options.logprobs is not None,
                        token_bytes=runtime.token_bytes if runtime is not None else None)
        if body.stream:  # from here the streaming response watches the connection itself
            include = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(_stream(job, first, answer, include, request),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        item = first
        while not isinstance(item, Done):
            if isinstance(item, APIError):
                raise item
            if isinstance(item, Chunk):
                answer.saw(item)
            if isinstance(item, Finished):
                _note(request, item)
                return JSONResponse(await _calls_checked(answer, answer.whole, item))
            item = await job.next(gone)
    except ConnectionResetError:
        return _gone(request)
    finally:
        watcher.cancel()
    if job.cancelled.is_set():
        return _gone(request)
    raise APIError(500, "the answer ended without a result", type="server_error")


async def _watch_disconnect(request: Request, job: Job) -> None:
    """Mark the job cancelled when the client disconnects (the worker stops within a step)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancelled.set()
            return


async def _stream(job: Job, item: Any, answer: Answer, include_usage: bool,
                  request: Request) -> AsyncIterator[str]:
    ended = False
    try:
        opening = answer.first()
        if opening:
            yield opening
        while not isinstance(item, Done):
            if isinstance(item, APIError):
                request.state.error = item.message
                ended = True
                yield error_event(item)
                return  # no [DONE]: the client must see the answer is incomplete
            if isinstance(item, Chunk):
                for line in await _calls_checked(answer, answer.step, item):
                    yield line
            elif isinstance(item, Finished):
                _note(request, item)
                for line in answer.finish(item, include_usage):
                    yield line
            item = await job.next()
        ended = True
        yield DONE
    finally:
        # Reached on the client leaving too (the response task is cancelled): the worker
        # stops this answer after its current step.
        job.cancelled.set()
        if not ended:
            request.state.error = "client disconnected"


async def _calls_checked(answer: Answer, step: Callable[[Any], T], item: Any) -> T:
    """`step(item)`; on a worker thread when the answer is read for tool calls, whose
    arguments are validated against their parameters there (bounded, but not free)."""
    if answer.calls is None:
        return step(item)
    return await run_in_threadpool(step, item)


def _gone(request: Request) -> Response:
    request.state.error = "client disconnected"
    return Response(status_code=CLIENT_GONE)


def _note(request: Request, finished: Finished) -> None:
    request.state.stats = finished.stats


class AccessLog:
    """One line per request on stderr, written when the response (streams too) is done."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [0]
        start = time.perf_counter()

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        except BaseException:
            status[0] = status[0] or 500
            raise
        finally:
            state = scope.get("state", {})
            print(access_line(scope["method"], scope["path"], status[0] or CLIENT_GONE,
                              state.get("stats"), state.get("error"),
                              time.perf_counter() - start), file=sys.stderr, flush=True)


def access_line(method: str, path: str, status: int, stats: Any, error: str | None,
                seconds: float) -> str:
    """One log line; what the client chose (the path, error texts quoting it) is shown
    with its control characters escaped, so a request cannot write to the terminal."""
    parts = [f"specchat: {method} {_printable(path)} {status}"]
    if stats is not None:
        parts.append(f"{stats.prompt_tokens}+{stats.generated} tok")
        parts.append(f"{stats.tokens_per_second:.1f} tok/s")
        acc = stats.acceptance
        parts.append(f"{stats.mode} acc {acc:.0%}" if acc is not None else
                     f"{stats.mode} acc n/a")
        if stats.prompt_cached:
            parts.append(f"reused {stats.prompt_cached} prompt tokens")
    if error:
        parts.append(_printable(error))
    parts.append(f"{seconds:.2f}s")
    return " · ".join(parts)


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
