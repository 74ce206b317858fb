"""What one request may cost everyone else: a real `specchat serve` process with a fake model
(tests/support/serve_fake_cli.py), driven over HTTP. Work is counted (model calls), never timed."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from specchat.engine.options import MAX_STOP_CHARS, MAX_STOPS
from tests.support.fakeserve import HELLO, Server, start, stop


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("serve"))
    yield server
    stop(server)
    assert "Traceback" not in server.log_text()


def _refused(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "stop"
    message = str(error["message"])
    assert "\n" not in message and len(message) < 300  # one line, the list not echoed
    return message


def test_too_many_stop_strings_are_a_400_naming_the_limit(served: Server) -> None:
    before = served.model_calls()
    flood = [f"{i:02x}"[-2:] for i in range(700_000)]  # 700,000 two-character stops, ~6 MB
    response = httpx.post(served.url + "/v1/chat/completions", timeout=120,
                          json={**HELLO, "stop": flood})
    assert f"at most {MAX_STOPS}" in _refused(response)
    assert served.model_calls() == before  # refused before any work


def test_stop_strings_too_long_in_all_are_a_400_naming_the_limit(served: Server) -> None:
    response = httpx.post(served.url + "/v1/completions", timeout=60,
                          json={"model": "fake-model", "prompt": "hi", "max_tokens": 2,
                                "stop": ["x" * (MAX_STOP_CHARS // 2 + 1)] * 2})
    assert f"at most {MAX_STOP_CHARS}" in _refused(response)


def test_the_most_stop_strings_allowed_are_answered(served: Server) -> None:
    stops = [f"\u2603{i}" for i in range(MAX_STOPS)]  # never in the fake model's words
    response = httpx.post(served.url + "/v1/chat/completions", timeout=60,
                          json={**HELLO, "stop": stops})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] == "length"


# --- a client that leaves ---------------------------------------------------------------------
def _send(server: Server, body: dict[str, object]) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data)
                 + data)
    return sock


def _wait(condition: Callable[[], bool]) -> None:
    for _ in range(6000):  # a minute at most, on however busy a machine
        if condition():
            return
        time.sleep(0.01)
    pytest.fail("the server never got there")


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_during_a_long_prefill_stops_it_within_a_step(
        tmp_path: Path, stream: bool) -> None:
    """A 60,000-token prompt is ~120 prefill calls of the (slowed) model and no event; the
    client closes its socket after a few. Counted in model calls, not seconds: what runs
    after the close is at most the call in flight, the next one, and the 2 calls of the
    short request that comes next (before, the whole prefill ran to its end)."""
    server = start(tmp_path, "--ctx", "0", delay=0.02)
    try:
        long = {**HELLO, "max_tokens": 100_000, "stream": stream,
                "messages": [{"role": "user", "content": "x" * 60_000}]}
        sock = _send(server, long)
        before = server.model_calls()
        _wait(lambda: server.model_calls() >= before + 3)  # the prefill is under way
        sock.close()
        at_close = server.model_calls()
        reply = httpx.post(server.url + "/v1/chat/completions", timeout=120,
                           json={**HELLO, "max_tokens": 1})  # queued behind the one left
        assert reply.status_code == 200, reply.text
        assert server.model_calls() - at_close <= 2 + 2
    finally:
        stop(server)
    assert " 499 " in server.log_text() and "Traceback" not in server.log_text()
