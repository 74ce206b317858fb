"""What one request may cost everyone else: a real `specchat serve` process with a fake model
(tests/serve_fake_cli.py), driven over HTTP. Work is counted (model calls), never timed."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from specchat.engine.options import MAX_STOP_CHARS, MAX_STOPS
from tests.test_serve_hostile import HELLO, Server, start, stop


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
