"""The HTTP API on fake models (in-process, Starlette's TestClient): bodies, SSE framing,
errors, queueing and cancelling. The real server process is in test_serve_real.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from specchat.backend.draftstore import open_store, usage_by_vocabulary
from specchat.engine.build import generate
from specchat.engine.events import Chunk, Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.serve.app import ServeConfig, create_app, model_aliases
from specchat.serve.errors import APIError
from specchat.serve.worker import READY, Done, Job, Worker
from specchat.settings.schema import BY_NAME, GENERATION, group
from tests.support.fake_runtime import chat_encode, encode, fake_model, fake_runtime
from tests.support.fakes import FakeModel
from tests.support.sse import sse

DEFAULTS = {name: BY_NAME[name].default for name in group(GENERATION) if name != "system"}
HELLO = [{"role": "user", "content": "hello"}]


class GatedModel(FakeModel):
    """A fake target whose eval waits for the test to open the gate (no sleeps, no timing)."""

    def __init__(self) -> None:
        base = fake_model()
        super().__init__(base.n_vocab, seed=0, order=2, eog=base.eog_tokens, pieces=base.pieces)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().eval(tokens, logit_rows)


class SteppedModel(FakeModel):
    """A fake target that evaluates one batch per permit the test hands out."""

    def __init__(self) -> None:
        base = fake_model()
        super().__init__(base.n_vocab, seed=0, order=2, eog=(), pieces=base.pieces)
        self.permits = threading.Semaphore(0)

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        assert self.permits.acquire(timeout=30), "the test handed out no permit"
        return super().eval(tokens, logit_rows)


def make_client(target: FakeModel | None = None, *, queue: int = 4, api_key: str | None = None,
                ready: bool = True, strict_model: bool = False) -> tuple[TestClient, Worker]:
    runtime = fake_runtime(target)
    worker = Worker(lambda: runtime, queue)
    config = ServeConfig(model="fake", defaults=dict(DEFAULTS, max_tokens=12, spec="off"),
                         api_key=api_key, strict_model=strict_model)
    if ready:
        worker.start()
        for _ in range(1000):
            if worker.state == READY:
                break
            threading.Event().wait(0.01)
    return TestClient(create_app(worker, config), base_url="http://localhost"), worker


@pytest.fixture
def client() -> Iterator[TestClient]:
    client, worker = make_client()
    yield client
    worker.stop()


def expected(messages: list[dict[str, str]] | None = None, raw: str | None = None,
             n: int = 12, **sampling: Any) -> Finished:
    prompt = encode(raw) if raw is not None else chat_encode(messages or HELLO)
    options = GenerationOptions(sampling=SamplingOptions(**sampling), max_tokens=n, spec="off")
    events = list(generate(fake_model(), prompt, options))
    assert isinstance(events[-1], Finished)
    return events[-1]


def test_chat_answer_is_the_engines_answer_with_usage(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"model": "fake", "messages": HELLO,
                                                  "temperature": 0, "future_field": 1})
    assert r.status_code == 200
    body = r.json()
    want = expected()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": want.text}
    assert body["choices"][0]["finish_reason"] == ("length" if want.reason == "length"
                                                   else "stop")
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(chat_encode(HELLO))
    assert usage["completion_tokens"] == len(want.tokens)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    spec = usage["speculative"]
    assert spec["mode"] == "off" and spec["steps"] == len(want.tokens)
    assert {"drafted", "accepted", "acceptance", "tokens_per_step",
            "speedup_estimate"} <= set(spec)


def test_text_parts_max_completion_tokens_and_seed(client: TestClient) -> None:
    body = {"model": "fake", "max_completion_tokens": 5, "temperature": 1.0, "seed": 3,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}
    first = client.post("/v1/chat/completions", json=body).json()
    again = client.post("/v1/chat/completions", json=body).json()
    want = expected(n=5, temperature=1.0, seed=3)
    assert first["choices"][0]["message"]["content"] == want.text
    assert again["choices"][0]["message"]["content"] == want.text


def test_chat_stream_is_openai_chunks_then_usage_then_done(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={
        "model": "fake", "messages": HELLO, "stream": True,
        "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    want = expected()
    assert text == want.text
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == len(want.tokens)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert len({c["id"] for c in chunks}) == 1


def test_stream_without_include_usage_has_no_usage_chunk(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"model": "fake", "messages": HELLO,
                                                  "stream": True})
    events = sse(r)
    assert all(e == "[DONE]" or (e["usage"] is None and e["choices"]) for e in events)


def test_text_completion_whole_and_streamed(client: TestClient) -> None:
    want = expected(raw="once upon", n=6)
    whole = client.post("/v1/completions", json={"model": "fake", "prompt": "once upon",
                                                 "max_tokens": 6}).json()
    assert whole["object"] == "text_completion"
    assert whole["choices"][0]["text"] == want.text
    r = client.post("/v1/completions", json={"model": "fake", "prompt": ["once upon"],
                                             "max_tokens": 6, "stream": True})
    events = sse(r)
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == want.text


def test_models_and_health(client: TestClient) -> None:
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["fake"]
    assert client.get("/health").json() == {"status": "ok"}


def test_health_is_503_while_loading() -> None:
    gate = threading.Event()
    runtime = fake_runtime()

    def slow_load() -> Any:
        assert gate.wait(30)
        return runtime

    worker = Worker(slow_load, 4)
    client = TestClient(create_app(worker, ServeConfig(model="fake", defaults=DEFAULTS)),
                        base_url="http://localhost")
    worker.start()
    assert client.get("/health").status_code == 503
    r = client.post("/v1/chat/completions", json={"model": "fake", "messages": HELLO})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
    gate.set()
    for _ in range(1000):
        if client.get("/health").status_code == 200:
            break
        threading.Event().wait(0.01)
    assert client.get("/health").status_code == 200
    worker.stop()


def _error(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert "Traceback" not in err["message"]
    return err


@pytest.mark.parametrize("body, param, words", [
    ({"model": "fake"}, "messages", "missing required field"),
    ({"model": 3, "messages": HELLO}, "model", "string"),
    ({"model": "fake", "messages": HELLO, "n": 2}, "n", "n=1"),
    ({"model": "fake", "messages": HELLO, "presence_penalty": 0.5}, "presence_penalty",
     "repeat_penalty"),
    ({"model": "fake", "messages": HELLO, "temperature": -1}, "temperature", ">= 0"),
    ({"model": "fake", "messages": HELLO, "top_p": 1.5}, "top_p", "top_p"),
    ({"model": "fake", "messages": [{"role": "function", "content": "x"}]},
     "messages[0].role", "system, user, assistant or tool"),
    ({"model": "fake", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages[0].content",
     "only text"),
])
def test_bad_requests_are_400_saying_what_to_change(client: TestClient, body: dict[str, Any],
                                                    param: str, words: str) -> None:
    err = _error(client.post("/v1/chat/completions", json=body), 400)
    assert err["param"] == param and words in err["message"]
    assert err["type"] == "invalid_request_error"
    # ...and the server keeps serving.
    assert client.post("/v1/chat/completions", json={"model": "fake",
                                                     "messages": HELLO}).status_code == 200


def test_malformed_json_unknown_model_unknown_path(client: TestClient) -> None:
    err = _error(client.post("/v1/chat/completions", content=b'{"model": "fake",',
                             headers={"content-type": "application/json"}), 400)
    assert "not valid JSON" in err["message"]
    err = _error(client.get("/v1/embeddings"), 404)
    assert "/v1/chat/completions" in err["message"]


def test_any_model_name_is_the_served_model_unless_strict(client: TestClient) -> None:
    for path, body in [("/v1/chat/completions", {"messages": HELLO}),
                       ("/v1/completions", {"prompt": "hi"})]:
        r = client.post(path, json={"model": "gpt-4o", **body})
        assert r.status_code == 200 and r.json()["model"] == "gpt-4o", r.text
    assert client.get("/v1/models").json()["data"][0]["meta"]["any_model_name"] is True
    strict, worker = make_client(strict_model=True)
    try:
        err = _error(strict.post("/v1/chat/completions", json={"model": "gpt-4o",
                                                               "messages": HELLO}), 404)
        assert err["code"] == "model_not_found" and "'fake'" in err["message"]
        assert strict.post("/v1/chat/completions", json={"model": "fake",
                                                         "messages": HELLO}).status_code == 200
        assert strict.get("/v1/models").json()["data"][0]["meta"]["any_model_name"] is False
    finally:
        worker.stop()


def test_a_model_file_path_has_friendly_names() -> None:
    config = ServeConfig(model="qwen.gguf", defaults=DEFAULTS,
                         aliases=model_aliases("/models/qwen.gguf"), strict_model=True)
    assert all(config.accepts(n) for n in ("qwen.gguf", "qwen", "/models/qwen.gguf"))
    assert not config.accepts("gpt-4o")


def test_context_overflow_is_400_with_its_code(client: TestClient) -> None:
    long = [{"role": "user", "content": "x" * 600}]  # the fake context holds 512
    err = _error(client.post("/v1/chat/completions", json={"model": "fake",
                                                           "messages": long}), 400)
    assert err["code"] == "context_length_exceeded" and "--ctx" in err["message"]
    assert client.post("/v1/chat/completions", json={"model": "fake",
                                                     "messages": HELLO}).status_code == 200


def test_api_key_401_missing_and_wrong() -> None:
    client, worker = make_client(api_key="s3cret")
    try:
        err = _error(client.get("/v1/models"), 401)
        assert "missing API key" in err["message"]
        err = _error(client.get("/v1/models", headers={"Authorization": "Bearer nope"}), 401)
        assert "wrong API key" in err["message"] and err["code"] == "invalid_api_key"
        ok = client.get("/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert client.get("/health").status_code == 200  # probes need no key
    finally:
        worker.stop()


def test_full_queue_is_429_with_retry_after() -> None:
    target = GatedModel()
    client, worker = make_client(target, queue=0)
    results: dict[str, Any] = {}

    def first() -> None:
        results["first"] = client.post("/v1/chat/completions",
                                       json={"model": "fake", "messages": HELLO})

    thread = threading.Thread(target=first)
    thread.start()
    assert target.entered.wait(30)  # the first request is being decoded
    err = _error(r := client.post("/v1/chat/completions",
                                  json={"model": "fake", "messages": HELLO}), 429)
    assert err["code"] == "rate_limit_exceeded" and "--queue" in err["message"]
    assert int(r.headers["Retry-After"]) >= 1
    target.gate.set()
    thread.join(30)
    assert results["first"].status_code == 200
    assert client.post("/v1/chat/completions",
                       json={"model": "fake", "messages": HELLO}).status_code == 200
    worker.stop()


def test_cancelled_job_stops_within_a_step_and_leaves_the_cache_consistent() -> None:
    import asyncio

    target = SteppedModel()
    runtime = fake_runtime(target)
    worker = Worker(lambda: runtime, 4)
    worker.start()
    loop = asyncio.new_event_loop()
    try:
        job = Job(HELLO, GenerationOptions(max_tokens=200, spec="off"), loop)
        job.out = asyncio.Queue()
        worker.submit(job)
        for _ in range(3):  # the prefill and two steps
            target.permits.release()

        async def take_two_then_cancel() -> list[Any]:
            items = [await job.next(), await job.next()]
            job.cancelled.set()
            for _ in range(10):  # plenty: the worker must not use them
                target.permits.release()
            while not isinstance(items[-1], Done):
                items.append(await job.next())
            return items

        items = loop.run_until_complete(take_two_then_cancel())
        evals = len(target.eval_calls)
        # The next job finds the cache consistent and reuses the prompt prefix.
        again = Job(HELLO, GenerationOptions(max_tokens=3, spec="off"), loop)
        again.out = asyncio.Queue()
        worker.submit(again)

        later = loop.run_until_complete(_until_done(again))
    finally:
        worker.stop()
        loop.close()
    chunks = [i for i in items if isinstance(i, Chunk)]
    assert not any(isinstance(i, Finished) for i in items)
    # The worker sees the mark after the step it is in (2 or 3 chunks by who is first), and
    # uses none of the 10 permits beyond that one step: the prefill and at most 3 steps.
    assert len(chunks) in (2, 3) and evals == 1 + len(chunks)
    finished = [i for i in later if isinstance(i, Finished)]
    assert finished and finished[0].text == expected(n=3).text
    assert finished[0].stats.prompt_cached == len(chat_encode(HELLO)) - 1


async def _until_done(job: Job) -> list[Any]:
    """Everything a job hands out, up to and including its Done."""
    got = [await job.next()]
    while not isinstance(got[-1], Done):
        got.append(await job.next())
    return got


def test_an_answer_sent_before_a_shutdown_is_still_kept(tmp_path: Path) -> None:
    """SIGTERM right after the client got its answer (the worker stops in the gap between
    handing out Finished and the drafting store's write) still keeps that answer."""
    import asyncio

    runtime = fake_runtime()
    target = runtime.target
    runtime.store = open_store(target.n_vocab, target.eog_tokens, target.token_bytes,
                               enabled=True, size="1M", private=False, root=tmp_path)
    worker = Worker(lambda: runtime, 4)

    @dataclass
    class StoppedOnceSent(Job):
        def push(self, item: Any) -> None:
            super().push(item)
            if isinstance(item, Finished):
                worker.cancel_all()  # what the server's SIGTERM handler does

    worker.start()
    loop = asyncio.new_event_loop()
    try:
        job = StoppedOnceSent(HELLO, GenerationOptions(max_tokens=5, spec="off"), loop)
        job.out = asyncio.Queue()
        worker.submit(job)

        items = loop.run_until_complete(_until_done(job))
    finally:
        worker.stop()
        loop.close()
    assert any(isinstance(i, Finished) for i in items)
    assert not any(isinstance(i, APIError) for i in items)  # no "cut short" after it
    assert sum(n for _, _, n in usage_by_vocabulary(tmp_path).values()) == 1
