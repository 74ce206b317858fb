"""The one thread that owns the models: requests are answered in arrival order (FIFO).

llama.cpp contexts here hold one sequence and the engine is synchronous, so one answer is
decoded at a time; the others wait in a bounded queue (a full queue is a 429). The thread
loads the models itself, so the HTTP listener can answer /health (503) while they load.

Cancelling: a job whose client went away is marked cancelled; the thread checks the mark
after every engine event (one verify step) and after every chunk of the prompt's prefill (a
long prompt is many chunks and no event), and llama.cpp checks it between the graph nodes of
a big batch (a prefill chunk on a slow machine is seconds); then the engine's generator is
closed, whose `finally` leaves the KV cache holding a prefix of what was committed.
"""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, cast

from specchat.backend.base import Backend, Message
from specchat.backend.clients import Client
from specchat.engine.events import Event, Finished
from specchat.engine.loop import Progress
from specchat.engine.options import GenerationOptions
from specchat.engine.sampling import NoTokenLeft
from specchat.errors import Cancelled, PromptTooLong, SpecchatError
from specchat.llm.tools import ToolSet
from specchat.serve.errors import APIError

LOADING, READY, FAILED, STOPPED = "loading", "ready", "failed", "stopped"


class Done:
    """The last item of every job's output."""


@dataclass
class Job:
    """One request: what to answer, and where the events go (an asyncio queue)."""

    prompt: list[Message] | str | list[int]  # chat messages, or a raw completion prompt
    options: GenerationOptions
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    tools: ToolSet | None = None  # functions a chat answer may call
    client: Client | None = None  # whom it is for: their own drafting (backend/clients.py)

    def push(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)
        except RuntimeError:  # the event loop is gone (shutdown): nobody is listening
            self.cancelled.set()

    async def next(self, gone: Callable[[], Any] | None = None, poll: float = 0.5) -> Any:
        """The next item; while waiting, `gone()` (awaitable) says if the client left."""
        while True:
            try:
                return await asyncio.wait_for(self.out.get(), timeout=poll)
            except TimeoutError:
                if gone is not None and await gone():
                    self.cancelled.set()
                    raise ConnectionResetError("client disconnected") from None


class Worker:
    def __init__(self, load: Callable[[], Backend], queue_size: int,
                 on_fail: Callable[[str], None] = lambda message: None) -> None:
        self._load = load
        self._on_fail = on_fail
        self.capacity = 1 + queue_size  # the one being decoded plus those waiting
        self.state = LOADING
        self.error = ""
        self.runtime: Backend | None = None
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._current: Job | None = None
        self._mean_seconds = 5.0  # running mean of answer time, for Retry-After
        self._thread = threading.Thread(target=self._run, name="specchat-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue a job, or refuse it with 503 (not ready) or 429 (queue full)."""
        if self.state != READY:
            raise APIError(503, "the model is still loading: retry in a few seconds"
                           if self.state == LOADING else "the server is shutting down",
                           type="server_error", code="model_not_ready",
                           headers={"Retry-After": "5"})
        with self._lock:
            if self._pending >= self.capacity:
                wait = math.ceil(self._mean_seconds * self._pending / self.capacity)
                raise APIError(
                    429, f"the queue is full ({self._pending} requests in flight or waiting; "
                    "this server answers one at a time): retry later, or start it with a "
                    "larger --queue", type="rate_limit_exceeded", code="rate_limit_exceeded",
                    headers={"Retry-After": str(max(1, wait))})
            self._pending += 1
        self._jobs.put(job)

    def cancel_all(self) -> None:
        """Shutting down: refuse new jobs, end queued ones, stop the one in flight."""
        if self.state != FAILED:
            self.state = STOPPED
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancelled.set()
                job.push(_shutting_down())
                job.push(Done())
                with self._lock:
                    self._pending -= 1
        current = self._current
        if current is not None:
            current.cancelled.set()

    def stop(self, timeout: float = 10.0) -> None:
        """cancel_all, then let the thread free the models."""
        self.cancel_all()
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.runtime = self._load()
        except BaseException as exc:  # noqa: BLE001 - reported, and the server exits 1
            self.state, self.error = FAILED, _describe(exc)
            self._on_fail(self.error)
            return
        if self.state == LOADING:
            self.state = READY
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    break
                self._current = job
                try:
                    self._answer(job)
                finally:
                    self._current = None
                    with self._lock:
                        self._pending -= 1
        finally:
            self.runtime.close()

    def _answer(self, job: Job) -> None:
        if job.cancelled.is_set():
            job.push(Done())
            return
        start = time.monotonic()
        events = self._events(job)
        answered = False
        try:
            for event in events:
                job.push(event)
                # Once the answer is out, what is left is keeping it (the drafting store's
                # write): a shutdown or a client leaving now must not lose it.
                answered = answered or isinstance(event, Finished)
                if job.cancelled.is_set() and not answered:
                    break  # within one verify step of the client leaving
        except Cancelled:
            pass  # its client left during the prefill: nobody is listening
        except APIError as exc:
            job.push(exc)
        except NoTokenLeft as exc:
            job.push(APIError(400, str(exc), param="logit_bias"))
        except Exception as exc:  # noqa: BLE001 - one failed answer must not stop the server
            job.push(APIError(500, f"the answer failed: {_describe(exc)}", type="server_error"))
        finally:
            events.close()
        if job.cancelled.is_set() and self.state == STOPPED and not answered:
            job.push(_shutting_down())
        job.push(Done())
        self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (time.monotonic() - start)

    def _events(self, job: Job) -> Generator[Event, None, None]:
        assert self.runtime is not None
        backend = self.runtime if job.client is None else self.runtime.for_client(job.client)
        prompt = job.prompt

        def progress(_: Progress) -> None:  # between two chunks of the prefill
            if job.cancelled.is_set():
                raise Cancelled("the client left")

        try:
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
                events = backend.answer(prompt, job.options, progress, tools=job.tools)
            else:
                events = backend.complete(cast(str | list[int], prompt), job.options, progress)
        except PromptTooLong as exc:
            param = "prompt" if isinstance(job.prompt, str) else "messages"
            size = f"at least {exc.tokens}" if exc.at_least else str(exc.tokens)
            raise APIError(400, f"the prompt is {size} tokens and this server's context "
                           f"holds {exc.n_ctx}, which leaves no room for an answer: shorten "
                           "the messages, or restart the server with a larger --ctx",
                           param=param, code="context_length_exceeded") from None
        except SpecchatError as exc:
            # A grammar (response_format, tools), a token id or the mode the model cannot do.
            raise APIError(400, str(exc).replace("--spec", "spec"),
                           param=getattr(exc, "param", "spec")) from None
        backend.cancel_when(job.cancelled.is_set)
        try:
            yield from events
        finally:
            backend.cancel_when(None)
            events.close()  # the engine's cleanup: the cache holds committed tokens only


def _shutting_down() -> APIError:
    return APIError(503, "the server is shutting down: this answer was cut short",
                    type="server_error", code="shutting_down")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SpecchatError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"
