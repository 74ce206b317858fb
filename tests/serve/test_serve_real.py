"""`specchat serve` as a real process on SmolLM2-135M, driven by the real `openai` client.

One server for the module (wait on /health); a second with --queue 0 for the 429 and the
shutdown. Answers are compared with `specchat ask` run as its own process with the same
options: `--spec ngram` on both sides, because its drafts (unlike `auto`'s timing-driven
choices) are a function of the tokens alone, so both sides evaluate the very same batches.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.realserve import (
    COMMON,
    KEY,
    MODEL,
    ROOT,
    Served,
    serve_env,
    start_server,
    stop,
)

openai = pytest.importorskip("openai")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
pytestmark = [pytest.mark.real, pytest.mark.slow]

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smol(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path(MODEL)


@pytest.fixture(scope="module")
def served(smol: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # --strict-model: test_error_bodies sees the 404 a client gets for another model's name
    # (by default any name is this model; tests/serve/test_agents_real.py sends one).
    server = start_server(tmp_path_factory.mktemp("serve"), smol, "--api-key", KEY,
                          "--strict-model")
    yield server
    stop(server)


def cli(served: Served, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specchat", *args], cwd=ROOT, env=served.env,
                          input=stdin if stdin is not None else "", capture_output=True,
                          text=True, timeout=600)


def local_ask(served: Served, question: str, *opts: str) -> str:
    done = cli(served, "ask", "-m", MODEL, *COMMON, *opts, question)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_chat_at_temperature_0_equals_specchat_ask(served: Served) -> None:
    want = local_ask(served, QUESTION, "-t", "0", "-n", "24")
    reply = served.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], temperature=0,
        max_tokens=24)
    text = reply.choices[0].message.content
    assert text and want == text + ("" if text.endswith("\n") else "\n")
    usage = reply.usage
    assert usage is not None and usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    spec = usage.model_extra["speculative"]
    assert spec["mode"] == "ngram" and spec["steps"] >= 1
    assert spec["accepted"] <= spec["drafted"]
    # Streamed, the same text arrives in pieces, then the usage.
    stream = served.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], temperature=0,
        max_tokens=24, stream=True, stream_options={"include_usage": True})
    pieces, usages = [], []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usages.append(chunk.usage)
    assert "".join(pieces) == text
    assert len(usages) == 1 and usages[0].completion_tokens == usage.completion_tokens
    # The repeated prompt came from the cache (the log says how much was reused).
    assert usages[0].prompt_tokens_details.cached_tokens > 0
    assert "reused" in served.wait_log("reused")


def test_completions_equal_ask_raw_and_seed_reproduces(served: Served) -> None:
    want = local_ask(served, "The capital of France is", "--raw", "-t", "0", "-n", "12")
    whole = served.client().completions.create(model=MODEL, prompt="The capital of France is",
                                               temperature=0, max_tokens=12)
    text = whole.choices[0].text
    assert want == text + ("" if text.endswith("\n") else "\n")
    streamed = "".join(c.choices[0].text for c in served.client().completions.create(
        model=MODEL, prompt="The capital of France is", temperature=0, max_tokens=12,
        stream=True) if c.choices)
    assert streamed == text
    sampled = [served.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}],
        temperature=0.9, seed=11, max_tokens=16).choices[0].message.content for _ in range(2)]
    assert sampled[0] == sampled[1]
    assert sampled[0] == local_ask(served, "Tell me a story.", "-t", "0.9", "--seed", "11",
                                   "-n", "16").rstrip("\n")


def test_concurrent_requests_are_all_answered(served: Served) -> None:
    questions = ["Name a color.", "Name a fruit.", "Name an animal.", "Name a planet."]
    answers: dict[str, str] = {}

    def ask(q: str) -> None:
        reply = served.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": q}], temperature=0,
            max_tokens=8)
        answers[q] = reply.choices[0].message.content or ""

    threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert sorted(answers) == sorted(questions) and all(answers.values())
    # Served one at a time from one cache, each is still exactly its own answer.
    solo = served.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": questions[0]}], temperature=0,
        max_tokens=8)
    assert solo.choices[0].message.content == answers[questions[0]]


def test_disconnect_mid_stream_then_a_correct_answer(served: Served) -> None:
    stream = served.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write a long essay about rivers."}],
        max_tokens=400, stream=True, temperature=0)
    seen = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            seen += 1
            if seen == 3:
                break
    stream.close()  # the client goes away mid-answer
    reply = served.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], temperature=0,
        max_tokens=24)
    want = local_ask(served, QUESTION, "-t", "0", "-n", "24")
    text = reply.choices[0].message.content or ""
    assert want == text + ("" if text.endswith("\n") else "\n")
    assert "client disconnected" in served.wait_log("client disconnected")


def test_error_bodies(served: Served) -> None:
    import httpx

    with pytest.raises(openai.AuthenticationError) as denied:
        served.client("wrong").models.list()
    assert denied.value.status_code == 401 and "API key" in denied.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        served.client().chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert "not served here" in str(missing.value.body)
    with pytest.raises(openai.BadRequestError) as bad:
        served.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], n=2)
    assert bad.value.body["param"] == "n"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as long:
        served.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "word " * 3000}])
    assert long.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    raw = httpx.post(served.url + "/v1/chat/completions", content=b"{not json",
                     headers={"Authorization": f"Bearer {KEY}",
                              "Content-Type": "application/json"})
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]
    assert "Traceback" not in served.log_text()
    assert served.client().models.list().data[0].id == MODEL  # still serving


def test_an_overlong_message_is_refused_before_it_is_tokenized(served: Served) -> None:
    """1.5 MB of text cannot fit 2048 tokens whatever the tokenizer does: the refusal says
    "at least", the bound found from the text's length and the longest token, not a count."""
    with pytest.raises(openai.BadRequestError) as long:
        served.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "word " * 300_000}])
    body = long.value.body
    assert body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert "the prompt is at least" in body["message"]  # type: ignore[index]
    completion = httpx_post(served, "/v1/completions",
                            {"model": MODEL, "prompt": "word " * 300_000})
    assert completion.status_code == 400 and "at least" in completion.text


def httpx_post(served: Served, path: str, body: dict[str, object]) -> object:
    import httpx

    return httpx.post(served.url + path, json=body, timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"})


def test_endpoint_round_trips_from_ask_and_chat(served: Served) -> None:
    want = local_ask(served, QUESTION, "-t", "0", "-n", "24")
    remote = ["--endpoint", served.url, "--api-key", KEY, "-t", "0", "-n", "24"]
    asked = cli(served, "ask", *remote, QUESTION)
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout == want
    chatted = cli(served, "chat", *remote, stdin=QUESTION + "\n")
    assert chatted.returncode == 0, chatted.stderr
    assert chatted.stdout == want
    as_json = cli(served, "ask", *remote, "--json", QUESTION)
    assert as_json.returncode == 0, as_json.stderr
    import json

    record = json.loads(as_json.stdout)
    assert record["text"] + ("" if record["text"].endswith("\n") else "\n") == want
    assert record["stats"]["mode"] == "remote ngram"  # the server's figures, relayed
    assert record["stats"]["generated"] >= record["stats"]["steps"] >= 1
    denied = cli(served, "ask", "--endpoint", served.url, "-n", "4", QUESTION)
    assert denied.returncode == 1 and "401" in denied.stderr
    assert "Traceback" not in denied.stderr


def test_full_queue_is_429_and_sigterm_exits_cleanly(smol: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, smol, "--queue", "0")
    try:
        client = server.client("unused")
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Write a long essay."}],
            max_tokens=400, stream=True)
        first = next(c for c in stream if c.choices and c.choices[0].delta.content)
        assert first is not None  # decoding now: the one slot is taken
        with pytest.raises(openai.RateLimitError) as full:
            client.chat.completions.create(model=MODEL, max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])
        assert full.value.status_code == 429
        assert int(full.value.response.headers["retry-after"]) >= 1
        assert "--queue" in full.value.message
        # SIGTERM mid-stream: the stream ends with an error event, the server exits 0.
        server.proc.send_signal(signal.SIGTERM)
        with pytest.raises(openai.APIError, match="shutting down"):
            for _ in stream:
                pass
        assert stop(server) == 0
    finally:
        stop(server, signal.SIGKILL)
    log = server.log_text()
    assert "Traceback" not in log and "specchat: stopped" in log


def test_a_request_extending_the_conversation_reuses_its_prefix(served: Served) -> None:
    first_messages = [{"role": "user", "content": "Name a large river."}]
    first = served.client().chat.completions.create(
        model=MODEL, messages=first_messages, temperature=0, max_tokens=12)
    answer = first.choices[0].message.content or ""
    assert first.usage is not None
    follow = served.client().chat.completions.create(
        model=MODEL, temperature=0, max_tokens=8, messages=[
            *first_messages, {"role": "assistant", "content": answer},
            {"role": "user", "content": "Which country is it in?"}])
    assert follow.usage is not None and follow.choices[0].message.content
    cached = follow.usage.prompt_tokens_details.cached_tokens
    assert first.usage.prompt_tokens <= cached < follow.usage.prompt_tokens
    assert f"reused {cached} prompt tokens" in served.wait_log(f"reused {cached} prompt")


def test_two_api_keys_draft_apart_and_leave_the_owners_store_alone(
        smol: Path, tmp_path: Path) -> None:
    """The owner asked a question with `ask` (their store keeps it); a server with two keys
    answers it: neither key drafts from the owner's answer, the second key nothing from the
    first's, and no client's words reach the owner's store (backend/clients.py)."""
    import httpx

    from specchat.backend.draftstore import usage_by_vocabulary

    question = "Write a haiku about a river."
    asked = subprocess.run([sys.executable, "-m", "specchat", "ask", "-m", MODEL, *COMMON,
                            "--spec", "auto", "-t", "0", "-n", "40", question], cwd=ROOT,
                           env=serve_env(tmp_path, smol), capture_output=True, text=True,
                           timeout=600)
    assert asked.returncode == 0, asked.stderr
    owner = tmp_path / "state" / "drafts"
    assert sum(n for _, _, n in usage_by_vocabulary(owner).values()) == 1
    (tmp_path / "keys").write_text("key-alice\nkey-bob\n")
    server = start_server(tmp_path, smol, "--spec", "auto", "--api-key-file",
                          str(tmp_path / "keys"))
    usages = []
    try:
        for key in ("key-alice", "key-alice", "key-bob"):
            reply = httpx.post(server.url + "/v1/chat/completions", timeout=600,
                               headers={"Authorization": f"Bearer {key}"},
                               json={"model": MODEL, "max_tokens": 40, "temperature": 0,
                                     "messages": [{"role": "user", "content": question}]})
            assert reply.status_code == 200, reply.text
            usages.append(reply.json()["usage"])
    finally:
        stop(server)
    drafted = [u["speculative"]["sources"].get("store", {}).get("drafted", 0)
               for u in usages]
    assert drafted[0] == 0 and drafted[1] > 0 and drafted[2] == 0
    assert usages[2]["prompt_tokens_details"]["cached_tokens"] == 0  # not Alice's prompt
    assert sum(n for _, _, n in usage_by_vocabulary(owner).values()) == 1
