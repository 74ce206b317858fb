"""`--endpoint` against broken and hostile servers (tests/support/fakeendpoint.py), through the real
CLI: each fault is one line on stderr and exit 1 (a bad URL: exit 2), never a success, a
traceback, unbounded memory or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fakeendpoint import WORDS, FakeEndpoint, serve

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("openai")


def ask(url: str, *extra: str, home: Path,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home), "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "specchat", "ask", "--endpoint", url, "--model", "fake", *extra,
         "Say hello"], cwd=ROOT, env=env, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=timeout, check=False)


def one_error(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: "), done.stderr
    return lines[0]


def test_a_proper_stream_is_the_answer(tmp_path: Path) -> None:
    with serve(FakeEndpoint("ok")) as ep:
        done = ask(ep.url, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(WORDS) + "\n"


def test_a_stream_cut_before_its_end_is_an_error(tmp_path: Path) -> None:
    with serve(FakeEndpoint("cut")) as ep:
        done = ask(ep.url, home=tmp_path)
    assert "cut off before it finished" in one_error(done)
    assert done.stdout.startswith("".join(WORDS[:3]))  # what arrived is kept


def test_a_web_page_is_not_an_empty_answer(tmp_path: Path) -> None:
    with serve(FakeEndpoint("html")) as ep:
        done = ask(ep.url, home=tmp_path)
    line = one_error(done)
    assert "text/html" in line and "instead of an event stream" in line


def test_an_endless_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    with serve(FakeEndpoint("huge_line")) as ep:
        done = ask(ep.url, "--timeout", "30", home=tmp_path)
    assert "more than 1024 KiB" in one_error(done)


def test_max_tokens_holds_when_the_server_ignores_it(tmp_path: Path) -> None:
    with serve(FakeEndpoint("endless")) as ep:
        done = ask(ep.url, "-n", "5", home=tmp_path, timeout=60)
        sent = ep.sent_chunks
    assert done.returncode == 0, done.stderr
    assert done.stdout == " w0 w1 w2 w3 w4\n"
    assert sent < 100_000  # the connection was closed, so the server stopped


def test_a_malformed_event_is_one_line(tmp_path: Path) -> None:
    with serve(FakeEndpoint("malformed")) as ep:
        done = ask(ep.url, home=tmp_path)
    line = one_error(done)
    assert "not JSON" in line and "JSONDecodeError" not in line


def test_an_event_of_the_wrong_shape_is_one_line(tmp_path: Path) -> None:
    with serve(FakeEndpoint("wrong_shape")) as ep:
        done = ask(ep.url, home=tmp_path)
    assert "malformed event" in one_error(done)


def test_a_silent_server_times_out(tmp_path: Path) -> None:
    with serve(FakeEndpoint("silent")) as ep:
        # The process is killed after 60 s, so this message can only come from the 2 s
        # timeout the option set (the old default waited ten minutes): no clock is read here.
        done = ask(ep.url, "--timeout", "2", home=tmp_path, timeout=60)
    assert "did not answer in time" in one_error(done)


def test_the_timeout_is_an_option_of_the_schema(tmp_path: Path) -> None:
    with serve(FakeEndpoint("silent")) as ep:
        env_home = tmp_path / "h"
        env_home.mkdir()
        (env_home / "config.toml").write_text("timeout = 2\n")
        done = ask(ep.url, home=env_home, timeout=60)
    assert "did not answer in time" in one_error(done)
    bad = ask("http://127.0.0.1:9", "--timeout", "0", home=tmp_path)
    assert "timeout must be a positive number" in one_error(bad, 2)


def test_a_bad_endpoint_url_is_a_usage_error(tmp_path: Path) -> None:
    done = ask("http://[::1", home=tmp_path)
    line = one_error(done, 2)
    assert "is not a valid URL" in line and "unexpected" not in line


def test_a_redirect_to_another_host_does_not_resend_the_conversation(tmp_path: Path) -> None:
    with serve(FakeEndpoint("ok"), name="localhost") as elsewhere, \
            serve(FakeEndpoint("redirect", target=elsewhere.url)) as ep:
        done = ask(ep.url, "--api-key", "sekrit", home=tmp_path)
        posted = [r for r in elsewhere.requests if r[0] == "POST"]
    line = one_error(done)
    assert "redirected to" in line and "another host" in line
    assert posted == []  # neither the conversation nor the key went there


def test_a_redirect_within_the_same_server_is_followed(tmp_path: Path) -> None:
    with serve(FakeEndpoint("redirect")) as ep:
        done = ask(ep.url, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(WORDS) + "\n"
    assert [r[1] for r in ep.requests if r[0] == "POST"] == ["/v1/chat/completions",
                                                             "/v2/chat/completions"]


def test_event_parsing_line_endings_comments_and_limits() -> None:
    from specchat.backend import sse
    from specchat.errors import SpecchatError

    raw = [b': keep-alive\r\n\r\ndata: {"a":', b' 1}\r\n\r\nevent: x\ndata: {"b": 2}\n', b"\n",
           b"data: [DONE]\n\n", b'data: {"after": 1}\n\n']
    assert list(sse.events(raw, "u")) == [{"a": 1}, {"b": 2}, sse.DONE]
    split = [b'data: {"a"', b":", b" 1}", b"\n", b"\n"]  # one byte at a time works too
    assert list(sse.events(split, "u")) == [{"a": 1}]
    with pytest.raises(SpecchatError, match="more than 1 KiB"):
        list(sse.events([b"data: " + b"x" * 600, b"y" * 600], "u", limit=1024))
    with pytest.raises(SpecchatError, match="more than 1 KiB"):  # many short lines, one event
        list(sse.events([b"data: xxxxxxxx\n"] * 200, "u", limit=1024))
    with pytest.raises(SpecchatError, match="cut off in the middle of an event"):
        list(sse.events([b'data: {"a": 1}\n'], "u"))
    with pytest.raises(SpecchatError, match="u: overloaded"):
        list(sse.events([b'data: {"error": {"message": "overloaded"}}\n\n'], "u"))
    with pytest.raises(SpecchatError, match="not a JSON object"):
        list(sse.events([b"data: [1, 2]\n\n"], "u"))
    with pytest.raises(SpecchatError, match="not JSON"):
        list(sse.events([b"data: " + b"[" * 100_000 + b"\n\n"], "u", limit=1 << 20))
