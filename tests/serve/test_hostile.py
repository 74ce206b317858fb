"""`specchat serve` against hostile pages and clients: a real server process (uvicorn on
127.0.0.1, tests/support/serve_fake_cli.py: the real CLI with a fake model), driven by raw sockets,
httpx and the real `openai` client."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.clirun import FakeStdin, run_cli
from tests.support.fakeserve import HELLO, MODEL, Server, start, stop

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("serve"), "--allow-host", "my.lan",
                   "--cors-origin", "http://localhost:3000")
    yield server
    stop(server)
    assert "Traceback" not in server.log_text()


def _error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error, dict)
    return error


# --- web pages ------------------------------------------------------------------------------
def test_a_text_plain_post_is_refused_before_any_work(served: Server) -> None:
    before = served.model_calls()
    error = _error(served.post(json.dumps(HELLO), content_type="text/plain"), 415)
    assert "application/json" in str(error["message"])
    assert served.model_calls() == before


def test_dns_rebinding_hosts_are_refused(served: Server) -> None:
    error = _error(served.post(json.dumps(HELLO), Host="evil.example"), 403)
    assert error["code"] == "host_not_allowed" and "--allow-host" in str(error["message"])
    for host in (f"localhost:{served.port}", f"127.0.0.1:{served.port}", "my.lan",
                 f"[::1]:{served.port}"):
        assert served.post(json.dumps(HELLO), Host=host).status_code == 200, host


def test_cors_only_for_listed_origins(served: Server) -> None:
    preflight = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}
    refused = httpx.options(served.url + "/v1/chat/completions", headers=preflight)
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    error = _error(served.post(json.dumps(HELLO), Origin="http://evil.example"), 403)
    assert error["code"] == "origin_not_allowed" and "--cors-origin" in str(error["message"])
    friend = {**preflight, "Origin": "http://localhost:3000",
              "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}
    allowed = httpx.options(served.url + "/v1/chat/completions", headers=friend)
    assert allowed.status_code == 204
    assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "x-stainless-os" in allowed.headers["access-control-allow-headers"]
    answer = served.post(json.dumps(HELLO), Origin="http://localhost:3000")
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_the_openai_client_is_served_as_before(served: Server) -> None:
    reply = served.client().chat.completions.create(model=MODEL, max_tokens=4,
                                                    messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].finish_reason == "length" and reply.choices[0].message.content


# --- sizes ----------------------------------------------------------------------------------
def test_a_body_over_the_limit_is_413_at_once(served: Server) -> None:
    big = {**HELLO, "messages": [{"role": "user", "content": "x" * (12 << 20)}]}
    before = served.model_calls()
    error = _error(served.post(json.dumps(big)), 413)
    assert "--max-body" in str(error["message"])
    assert served.model_calls() == before
    with pytest.raises(openai.APIStatusError) as info:  # what an OpenAI client sees
        served.client().chat.completions.create(model=MODEL, messages=big["messages"])
    assert info.value.status_code == 413


def test_too_many_messages_are_refused_before_rendering(served: Server) -> None:
    many = [{"role": "user", "content": "hi"}] * 5000
    error = _error(served.post(json.dumps({**HELLO, "messages": many})), 413)
    assert error["code"] == "too_many_messages" and "--max-messages" in str(error["message"])


# --- bodies Python cannot take as they are: a 400, never a 500 -------------------------------
def test_a_lone_surrogate_is_400(served: Server) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "a\ud800b"}]})
    assert "\\ud800" in body  # json.dumps escapes it: the server gets a lone \ud800 escape
    error = _error(served.post(body), 400)
    assert error["param"] == "messages[0].content" and "surrogate" in str(error["message"])
    paired = body.replace("\\ud800", "\\ud83d\\ude00")  # an emoji as a surrogate pair is fine
    assert served.post(paired).status_code == 200


def test_json_nested_deeper_than_python_reads_is_400(served: Server) -> None:
    error = _error(served.post("[" * 100_000 + "]" * 100_000), 400)
    assert "nests too deeply" in str(error["message"])


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_non_finite_temperature_is_400(served: Server, value: str) -> None:
    body = json.dumps(HELLO)[:-1] + f', "temperature": {value}}}'
    error = _error(served.post(body), 400)
    assert "temperature" in str(error["message"]) or "JSON" in str(error["message"])


# --- slow clients, too many connections -------------------------------------------------------
def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_slow_clients_are_cut_off_and_connections_capped(tmp_path: Path) -> None:
    server = start(tmp_path, "--max-connections", "4", "--read-timeout", "5")
    try:
        slow = [socket.create_connection(("127.0.0.1", server.port), timeout=60)
                for _ in range(3)]
        for sock in slow:  # headers that never end
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        slow.append(socket.create_connection(("127.0.0.1", server.port), timeout=60))
        time.sleep(1)  # let the server see them all before the fifth comes
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as fifth:
            assert _read_all(fifth).startswith(b"HTTP/1.1 503")
        for sock in slow[:3]:  # closed by the server, not by us: recv sees the end
            assert _read_all(sock).startswith(b"HTTP/1.1 408")
        assert _read_all(slow[3]) == b""  # it said nothing: closed without a word
        for sock in slow:
            sock.close()
        assert server.post(json.dumps(HELLO)).status_code == 200
    finally:
        stop(server)
    log = server.log_text()
    assert "Traceback" not in log
    assert log.count("connections are open (--max-connections)") == 1
    assert log.count("sent no complete request within 5 s") == 1


def test_running_out_of_descriptors_is_a_line_not_a_flood(tmp_path: Path) -> None:
    server = start(tmp_path, "--max-connections", "1000", files=64)
    opened: list[socket.socket] = []
    try:
        for _ in range(300):
            try:
                opened.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
            except OSError:
                break
        time.sleep(3)
        for sock in opened:
            sock.close()
        opened.clear()
        time.sleep(1)
        assert server.post(json.dumps(HELLO)).status_code == 200
    finally:
        for sock in opened:
            sock.close()
        stop(server)
    log = server.log_text()
    assert "Traceback" not in log and len(log) < 20_000, log[:2000]
    assert "ulimit -n 64" in log  # the cap was lowered to what the limit leaves


# --- a client that leaves a whole (non-streamed) answer --------------------------------------
def test_a_non_streaming_client_that_leaves_stops_its_answer(tmp_path: Path) -> None:
    server = start(tmp_path, "--ctx", "0", delay=0.02)
    try:
        long = {**HELLO, "max_tokens": 100_000}
        with pytest.raises(httpx.ReadTimeout):  # leaves after 1.5 s of a ~30 min answer
            httpx.post(server.url + "/v1/chat/completions", json=long, timeout=1.5)
        reply = server.client().chat.completions.create(
            model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "next"}])
        assert reply.choices[0].finish_reason == "length"
        calls = server.model_calls()
        time.sleep(1)
        assert server.model_calls() == calls  # nothing decodes for the client who left
        assert calls < 10_000
    finally:
        stop(server)
    assert " 499 " in server.log_text()


# --- options --------------------------------------------------------------------------------
# Should a check be missing, `serve` must fail at once instead of fetching the default model.
NO_MODEL = ["-m", "/nonexistent/none.gguf", "--port", "0"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    return tmp_path


@pytest.mark.parametrize("args", [["-t", "inf"], ["--temperature", "nan"],
                                  ["--repeat-penalty", "inf"], ["--top-p", "nan"]])
def test_non_finite_sampling_flags_are_usage_errors(home: Path, capsys: pytest.CaptureFixture[str],
                                                    args: list[str]) -> None:
    code, _, err = run_cli(["serve", *NO_MODEL, *args], capsys)
    assert code == 2 and "must be a finite number" in err, err


def test_non_finite_temperature_in_the_config_file(home: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (home / "config.toml").write_text("temperature = inf\n")
    code, _, err = run_cli(["serve", *NO_MODEL], capsys)
    assert code == 2 and "temperature must be a finite number" in err, err


@pytest.mark.parametrize("key", ["clé-secrète", "", "two words"])
def test_api_keys_that_cannot_travel_in_a_header_are_refused(
        home: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    code, out, err = run_cli(["serve", *NO_MODEL, "--api-key", key], capsys)
    assert code == 2 and "printable ASCII" in err, err
    assert (key not in err) if key else True  # a secret is never echoed


def test_event_loop_errors_are_one_line_per_interval(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import errno

    from specchat.serve import limits

    monkeypatch.setattr(limits, "NOTICES", limits.Notices(interval=3600))
    loop = asyncio.new_event_loop()
    try:
        for _ in range(2048):  # what one failed accept() round used to log, with tracebacks
            limits.loop_errors(loop, {"message": "socket.accept() out of system resource",
                                      "exception": OSError(errno.EMFILE, "Too many open files")})
        limits.loop_errors(loop, {"message": "something else", "exception": ValueError("x")})
    finally:
        loop.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "specchat: error: cannot accept connections: Too many open files (lower "
        "--max-connections or raise `ulimit -n`); retrying",
        "specchat: error: something else: ValueError: x"]


def test_host_names_the_guard_accepts() -> None:
    from specchat.serve.guard import Policy

    policy = Policy(bound_host="0.0.0.0", allow_hosts=("my.lan:8080", ".corp.example"))
    for host in ("127.0.0.1:8080", "[::1]:80", "10.0.0.5", "localhost", "LOCALHOST:1",
                 "a.localhost", "my.lan", "my.lan.:9", "x.corp.example", None):
        assert policy.host_ok(host), host
    for host in ("evil.example", "127.0.0.1.nip.io", "my.lan.evil", "corp.example.evil",
                 "a:b", "[::1", "", "localhost.evil"):
        assert not policy.host_ok(host), host
    assert Policy(allow_hosts=("*",)).host_ok("anything.example")
