"""`--endpoint`: the chat and ask against an OpenAI-compatible server, here specchat's own app
on fake models in-process (the openai client talks to it through Starlette's TestClient)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from specchat.backend.remote import RemoteRuntime, base_url
from specchat.chat import commands
from specchat.chat.chatlog import ChatLog
from specchat.chat.render import RenderConfig, Renderer, status_text
from specchat.chat.session import ChatSession
from specchat.engine.events import Chunk, Finished
from specchat.errors import SpecchatError, UsageError
from specchat.serve.app import ServeConfig, create_app
from specchat.serve.worker import READY, Worker
from specchat.settings.schema import BY_NAME, GENERATION, group
from tests.support import chat_fakes as f

DEFAULTS = {name: BY_NAME[name].default for name in group(GENERATION) if name != "system"}


@pytest.fixture
def server() -> Iterator[TestClient]:
    worker = Worker(f.runtime, 4)
    worker.start()
    while worker.state != READY:
        assert worker.state == "loading"
        worker._thread.join(0.01)
    # Strict about model names, so a server's 404 can be seen relayed as one line.
    app = create_app(worker, ServeConfig(model="fake", defaults=dict(DEFAULTS, spec="off"),
                                         api_key="k", strict_model=True))
    yield TestClient(app, base_url="http://localhost")  # a Host the server accepts
    worker.stop()


def remote(server: TestClient, **kw: Any) -> RemoteRuntime:
    return RemoteRuntime("http://localhost", kw.pop("key", "k"), kw.pop("model", None),
                         f.options(**kw), http_client=server)


def remote_session(tmp: Path, rt: RemoteRuntime, streams: f.Streams) -> ChatSession:
    config = RenderConfig(rich=False, markdown=False, show_draft=False, summary=True)
    renderer = Renderer(config, streams.out, streams.err, draft_name=None, token_bytes=None)
    return ChatSession(runtime=rt, options=f.options(), renderer=renderer,
                       chatlog=ChatLog(tmp / "remote.jsonl", meta={"model": "fake"}))


def test_base_url_forms() -> None:
    assert base_url("http://h:8080") == base_url("http://h:8080/v1/") == "http://h:8080/v1"
    with pytest.raises(UsageError):
        base_url("h:8080")


def test_remote_chat_turns_equal_local_turns(tmp_path: Path, server: TestClient) -> None:
    """The same conversation, locally and through the API: the same answers, turn by turn."""
    local, _ = f.session(tmp_path / "l")
    streams = f.Streams()
    chat = remote_session(tmp_path, remote(server), streams)
    assert chat.runtime.info.target_name == "fake"  # the server's only model, from /v1/models
    for question in ("hello there", "tell me more", "and then"):
        want = local.ask(question)
        got = chat.ask(question)
        assert want is not None and got is not None
        assert got.assistant == want.assistant
        assert got.stats is not None and got.stats["generated"] == want.stats["generated"]
    out, err = streams.take()
    assert out.startswith(chat.conversation.turns[0].assistant)
    assert "remote off" in err  # the summary line names where the answer came from
    # The server reused the conversation's prefix each turn.
    assert chat.tally.prompts[-1].cached > 0


def test_slash_commands_without_local_models(tmp_path: Path, server: TestClient) -> None:
    streams = f.Streams()
    chat = remote_session(tmp_path, remote(server), streams)
    chat.ask("hello")
    for line in ("/show", "/stats", "/regen", "/undo", "/system be brief", "/clear"):
        commands.dispatch(chat, line)
    _, err = streams.take()
    assert "the server's" in err and "http://localhost/v1" in err
    with pytest.raises(UsageError, match="server"):
        commands.dispatch(chat, "/mode ngram")


def test_live_figures_come_from_the_server(server: TestClient) -> None:
    rt = remote(server, max_tokens=6)
    events = list(rt.answer([{"role": "user", "content": "hi"}], f.options(max_tokens=6)))
    chunks = [e for e in events if isinstance(e, Chunk)]
    finished = events[-1]
    assert isinstance(finished, Finished) and chunks
    assert finished.stats.mode == "remote off"
    assert finished.stats.generated == 6 and finished.stats.steps == 6
    assert finished.stats.steps_empty == 6 and finished.stats.steps_drafted == 0
    assert "tok/s" in status_text(chunks[-1].stats, None)
    assert finished.text == "".join(c.text for c in chunks)


def test_server_errors_are_one_line(server: TestClient) -> None:
    with pytest.raises(SpecchatError, match="answered 401: wrong API key"):
        remote(server, key="nope")
    rt = remote(server, model="gpt-4o")
    with pytest.raises(SpecchatError, match="answered 404: model 'gpt-4o' is not served"):
        list(rt.answer([{"role": "user", "content": "hi"}], f.options()))


def test_unreachable_endpoint_says_so() -> None:
    with pytest.raises(SpecchatError, match="cannot reach http://127.0.0.1:9/v1"):
        RemoteRuntime("http://127.0.0.1:9", None, None, f.options(), timeout=5)


def test_repl_keys_against_a_remote_server(tmp_path: Path, server: TestClient) -> None:
    """The prompt-toolkit REPL, typed into through a pipe, with the remote backend."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from specchat.chat import repl

    streams = f.Streams()
    chat = remote_session(tmp_path, remote(server), streams)
    local, _ = f.session(tmp_path / "l")
    keys = "hello there\r/show\r/stats\rtell me more\r/undo\r\x04"
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        prompt = repl.make_prompt(chat, input_lines=None, input=pipe, output=DummyOutput())
        code = repl.run(chat, prompt)
    assert code == 0
    assert [t.user for t in chat.conversation.turns] == ["hello there"]
    want = local.ask("hello there")
    assert want is not None and chat.conversation.turns[0].assistant == want.assistant
    _, err = streams.take()
    assert "remote off" in err and "error" not in err.lower()
