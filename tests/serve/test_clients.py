"""A server's clients kept apart (backend/clients.py, docs/security.md): a real `specchat
serve` process with a fake model (tests/support/serve_fake_cli.py) and two API keys. One client's
words never shape another's drafts or statistics; the owner's own drafting store (what
`ask` and `chat` keep) is read only when the server is told to, and never written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from specchat.backend.draftstore import usage_by_vocabulary
from specchat.engine.events import drain
from specchat.engine.options import GenerationOptions, Spec
from specchat.settings.load import LoadSettings
from tests.support.clirun import run_cli
from tests.support.fakeserve import MODEL, Server, start, stop
from tests.support.serve_fake_cli import open_fake

KEYS = ("key-alice", "key-bob")
QUESTION = "tell me the story again"
OTHER = "and now another one"


def messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def ask(server: Server, key: str, text: str, **fields: object) -> dict[str, Any]:
    body = {"model": MODEL, "messages": messages(text), "max_tokens": 60, "temperature": 0,
            **fields}
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    usage: dict[str, Any] = response.json()["usage"]
    return usage


def history(usage: dict[str, Any]) -> int:
    """Tokens drafted from the drafting store for this answer."""
    return int(usage["speculative"]["sources"].get("store", {}).get("drafted", 0))


def owner_records(home: Path) -> int:
    return sum(n for _, _, n in usage_by_vocabulary(home / "state" / "drafts").values())


def serve_records(home: Path) -> int:
    root = home / "state" / "serve-drafts"
    return sum(n for d in (root.iterdir() if root.is_dir() else [])
               for _, _, n in usage_by_vocabulary(d).values())


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose owner asked QUESTION before: their drafting store holds its answer,
    written as `ask` writes it. No SPECCHAT_ variable of the shell running the tests (a
    store folder, an option) reaches the server: it keeps everything under this home."""
    for name in [n for n in os.environ if n.startswith("SPECCHAT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    runtime = open_fake(LoadSettings())  # opens the owner's store under this home
    drain(runtime.answer(messages(QUESTION), GenerationOptions(max_tokens=60, spec=Spec.AUTO)))
    assert owner_records(tmp_path) == 1
    (tmp_path / "keys").write_text("# two clients\n" + "\n".join(KEYS) + "\n")
    return tmp_path


def serve(home: Path, *args: str) -> Server:
    return start(home, "--spec", "auto", "--api-key-file", str(home / "keys"), *args)


def test_each_key_drafts_from_its_own_answers_only(home: Path) -> None:
    server = serve(home)
    try:
        alice_first = ask(server, KEYS[0], QUESTION)
        alice_again = ask(server, KEYS[0], QUESTION)
        bob_first = ask(server, KEYS[1], QUESTION)
    finally:
        stop(server)
    assert history(alice_first) == 0  # the owner's answer to it is not read
    assert history(alice_again) > 0  # her own earlier answer is
    # Bob is told exactly what a first client is told: nothing of Alice's answers, of what
    # `auto` learnt from them, or of her prompt in the KV cache (cached_tokens).
    assert bob_first == {**alice_first, "speculative": bob_first["speculative"]}
    for name in ("steps", "drafted", "accepted", "sources", "mode"):
        assert bob_first["speculative"][name] == alice_first["speculative"][name], name
    assert bob_first["prompt_tokens_details"]["cached_tokens"] == 0
    assert owner_records(home) == 1  # clients' words never go into the owner's store
    assert serve_records(home) == 3
    folders = [p.name for p in (home / "state" / "serve-drafts").iterdir()]
    assert len(folders) == 2 and not any(k in f for k in KEYS for f in folders)


def test_store_false_is_never_written(home: Path) -> None:
    server = serve(home)
    try:
        ask(server, KEYS[0], OTHER, store=False)
        again = ask(server, KEYS[0], OTHER)
    finally:
        stop(server)
    assert history(again) == 0
    assert serve_records(home) == 1  # only the answer whose request did not say false


def test_private_neither_reads_nor_writes_any_store(home: Path) -> None:
    server = serve(home, "--private")
    try:
        first = ask(server, KEYS[0], QUESTION)
        again = ask(server, KEYS[0], QUESTION)
    finally:
        stop(server)
    assert history(first) == history(again) == 0
    assert owner_records(home) == 1 and serve_records(home) == 0


def test_draft_from_chats_reads_the_owners_store_and_never_writes_it(home: Path) -> None:
    server = serve(home, "--draft-from-chats")
    try:
        first = ask(server, KEYS[0], QUESTION)
    finally:
        stop(server)
    assert history(first) > 0
    assert owner_records(home) == 1 and serve_records(home) == 1


@pytest.mark.parametrize(("args", "said"), [
    (["--api-key-file", "/nonexistent/keys"], "no such file"),
    (["--api-key-file", "{bad}"], "line 2: an API key must be printable ASCII"),
    (["--api-key-file", "/dev/zero"], "not a regular file"),
    (["--draft-from-chats", "--private"], "use one of them"),
])
def test_bad_key_files_and_contradictions_are_one_line(
        home: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str) -> None:
    bad = home / "bad-keys"
    bad.write_text("good-key\nkey with spaces\n")
    args = [str(bad) if a == "{bad}" else a for a in args]
    code, _, err = run_cli(["serve", "-m", "/nonexistent/none.gguf", "--port", "0", *args],
                           capsys)
    assert code == 2, err
    assert said in err and "key with spaces" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_server_keeps_its_stores_where_bench_sessions_points_it(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench --sessions --via serve` gives each mode's server an empty store of its own;
    the server must keep its clients' answers there, not in the user's state folder."""
    from specchat.bench.session_runner import Launch

    mode_store = home / "bench-store"
    env = Launch(("python",), (), 8).with_store(mode_store)
    monkeypatch.setenv("SPECCHAT_SERVE_STORE_DIR", env["SPECCHAT_SERVE_STORE_DIR"])
    server = start(home, "--spec", "auto")
    try:
        response = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": messages(OTHER), "max_tokens": 8})
        assert response.status_code == 200, response.text
    finally:
        stop(server)
    assert serve_records(home) == 0
    assert sum(n for _, _, n in usage_by_vocabulary(mode_store / "open").values()) == 1
