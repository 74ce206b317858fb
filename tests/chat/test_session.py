"""Chat turns on the fake model: KV reuse, Ctrl-C mid-answer, context trimming, persistence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.chat.chatlog import ChatLog, load_conversation, read_records, save_copy
from specchat.chat.conversation import Conversation, Turn
from specchat.chat.render import RenderConfig, Renderer
from specchat.engine.events import Chunk
from specchat.errors import UsageError
from tests.support import chat_fakes as f


def test_second_turn_evaluates_only_the_new_tokens(tmp_path: Path) -> None:
    chat, _ = f.session(tmp_path)
    model = chat.runtime.target
    first = chat.ask("hello there")
    assert first is not None and first.assistant
    cached = list(model.tokens)
    before = model.evaluated
    chat.ask("tell me more")
    prompt2 = f.chat_tokens(chat.conversation.messages()[:-1])
    # The cache held turn 1 exactly as turn 2's prompt renders it: nothing re-evaluated.
    assert prompt2[: len(cached)] == cached
    new_prompt = len(prompt2) - len(cached)
    generated = chat.tally.generated - (first.stats or {})["generated"]
    # The prompt's last token goes with the first decode step, so steps cover it.
    assert model.evaluated - before == new_prompt - 1 + chat.tally.steps - 40
    assert chat.tally.prompts[1].cached == len(cached)
    assert generated == 40


def test_prompt_cost_does_not_grow_with_history(tmp_path: Path) -> None:
    chat, _ = f.session(tmp_path, max_tokens=20)
    for _ in range(5):
        chat.ask("question number")
    new = [p.tokens - p.cached for p in chat.tally.prompts]
    first = len(f.chat_tokens([{"role": "user", "content": "question number"}]))
    # Later turns: the question, the end mark of the previous answer, and that answer's last
    # token (the engine keeps the cache one token behind what it committed).
    assert new == [first] + [first + 2] * 4
    assert chat.tally.prompts[-1].tokens > 5 * first


def test_ctrl_c_inside_the_stream_keeps_partial_answer(tmp_path: Path) -> None:
    model = f.ChatModel()
    chat, streams = f.session(tmp_path, f.runtime(model), max_tokens=40)
    prompt = f.chat_tokens([{"role": "user", "content": "hello"}])
    model.interrupt_after_calls = 6  # prefill, then five decode steps, then Ctrl-C
    committed: list[int] = []
    original = chat.renderer.answer

    def spy():  # record exactly the tokens the engine reported as committed
        cm = original()
        view = cm.__enter__()
        chunk = view.chunk

        def record(c: Chunk) -> None:
            committed.extend(c.tokens)
            chunk(c)
        view.chunk = record  # type: ignore[method-assign]
        return _Wrap(cm, view)

    chat.renderer.answer = spy  # type: ignore[method-assign]
    turn = chat.ask("hello")
    assert turn is not None and turn.interrupted and turn.reason == ""
    assert turn.assistant and len(committed) == 5
    # The cache holds prompt + answer minus the last token: what the engine promises.
    assert list(model.tokens) == prompt + committed[:-1]
    out, err = streams.take()
    assert out.startswith(turn.assistant) and "interrupted" in err
    record = read_records(chat.chatlog.path)[-1]
    assert record["type"] == "turn" and record["interrupted"] is True
    # The next turn works and builds on the partial answer.
    chat.renderer.answer = original  # type: ignore[method-assign]
    nxt = chat.ask("go on")
    assert nxt is not None and not nxt.interrupted
    assert chat.conversation.messages()[1] == {"role": "assistant", "content": turn.assistant}


class _Wrap:
    def __init__(self, cm, view) -> None:  # type: ignore[no-untyped-def]
        self.cm, self.view = cm, view

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self.view

    def __exit__(self, *exc):  # type: ignore[no-untyped-def]
        return self.cm.__exit__(*exc)


def test_ctrl_c_while_rendering_closes_the_generator(tmp_path: Path) -> None:
    model = f.ChatModel()
    chat, _ = f.session(tmp_path, f.runtime(model))
    original = Renderer.answer
    seen = []

    class Boom(Exception):
        pass

    def chunk(self, c: Chunk) -> None:  # type: ignore[no-untyped-def]
        seen.append(c)
        if len(seen) == 3:
            raise KeyboardInterrupt

    from specchat.chat import render
    old = render.AnswerView.chunk
    render.AnswerView.chunk = chunk  # type: ignore[method-assign]
    try:
        turn = chat.ask("hi")
    finally:
        render.AnswerView.chunk = old  # type: ignore[method-assign]
    assert original is Renderer.answer
    assert turn is None or turn.interrupted
    tokens = [t for c in seen for t in c.tokens]
    prompt = f.chat_tokens([{"role": "user", "content": "hi"}])
    assert list(model.tokens) == (prompt + tokens)[:-1]


def test_ctrl_c_before_any_text_keeps_no_turn(tmp_path: Path) -> None:
    model = f.ChatModel()
    chat, streams = f.session(tmp_path, f.runtime(model))
    model.interrupt_after_calls = 0
    assert chat.ask("hello") is None
    assert chat.conversation.turns == [] and not chat.chatlog.path.exists()
    assert chat.ask("hello again") is not None


def test_context_full_drops_oldest_turns_keeps_system(tmp_path: Path) -> None:
    model = f.ChatModel(n_ctx=200)
    chat, streams = f.session(tmp_path, f.runtime(model), max_tokens=30)
    chat.set_system("be brief")
    for i in range(8):
        assert chat.ask(f"question {i} " + "pad " * 5) is not None
    out, err = streams.take()
    assert "context full" in err and "oldest turn" in err
    assert chat.conversation.start > 0
    messages = chat.conversation.messages("next")
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert len(f.chat_tokens(messages)) <= 200
    # Everything is still in the saved conversation.
    assert len(load_conversation(chat.chatlog.path).turns) == 8


def test_message_longer_than_the_context_is_a_clear_error(tmp_path: Path) -> None:
    chat, _ = f.session(tmp_path, f.runtime(f.ChatModel(n_ctx=64)))
    with pytest.raises(UsageError, match="raise --ctx"):
        chat.ask("x" * 100)
    assert chat.ask("short") is not None


def test_answer_cut_by_full_context_is_no_crash(tmp_path: Path) -> None:
    chat, streams = f.session(tmp_path, f.runtime(f.ChatModel(n_ctx=40)), max_tokens=200)
    turn = chat.ask("hello")
    assert turn is not None and turn.reason == "context"
    assert "context full" in streams.take()[1]
    assert chat.ask("again") is not None


def test_regen_undo_clear(tmp_path: Path) -> None:
    chat, streams = f.session(tmp_path, temperature=1.0, seed=None)
    a = chat.ask("one")
    chat.ask("two")
    b = chat.regen()
    assert b is not None and b.user == "two" and len(chat.conversation.turns) == 2
    assert chat.undo().user == "two"
    assert [t.user for t in chat.conversation.turns] == ["one"]
    assert load_conversation(chat.chatlog.path).turns[0].assistant == a.assistant  # type: ignore
    old = chat.chatlog.path
    chat.clear()
    assert chat.conversation.turns == [] and chat.chatlog.path != old
    with pytest.raises(UsageError):
        chat.undo()
    with pytest.raises(UsageError):
        chat.regen()


def test_a_chat_log_skips_a_torn_last_line(tmp_path: Path) -> None:
    chatlog = ChatLog(tmp_path / "c.jsonl")
    chatlog.append({"type": "turn", "user": "a", "assistant": "b"})
    with open(chatlog.path, "a") as fh:
        fh.write('{"type": "turn", "user": "half')
    conv = load_conversation(chatlog.path)
    assert [(t.user, t.assistant) for t in conv.turns] == [("a", "b")]
    assert json.loads(chatlog.path.read_text().splitlines()[0])["format"] == \
        "specchat-conversation"


def test_replay_of_undo_system_and_clear() -> None:
    conv = Conversation.from_records([
        {"type": "system", "text": "s"}, {"type": "turn", "user": "1", "assistant": "a"},
        {"type": "turn", "user": "2", "assistant": "b"}, {"type": "undo"},
        {"type": "turn", "user": "3", "assistant": "c", "interrupted": True},
    ])
    assert conv.system == "s" and [t.user for t in conv.turns] == ["1", "3"]
    assert conv.turns[1].interrupted
    assert Conversation.from_records([*conv.to_records(), {"type": "clear"}]).turns == []


def test_save_copy_jsonl_and_markdown(tmp_path: Path) -> None:
    conv = Conversation(system="sys", turns=[Turn("q", "a ```x```", interrupted=True)])
    save_copy(conv, tmp_path / "c.jsonl")
    assert load_conversation(tmp_path / "c.jsonl").turns == conv.turns
    save_copy(conv, tmp_path / "c.md")
    text = (tmp_path / "c.md").read_text()
    assert "## You" in text and "*(interrupted)*" in text


def test_load_seeds_a_new_file_only_when_something_is_added(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    chat, _ = f.session(tmp_path)
    chat.ask("one")
    saved = tmp_path / "saved.jsonl"
    chat.save(saved)
    other, _ = f.session(tmp_path / "b")
    other.load(saved)
    assert [t.user for t in other.conversation.turns] == ["one"]
    assert not other.chatlog.started and other.chatlog.path is None
    other.ask("two")
    assert [t.user for t in load_conversation(other.chatlog.path).turns] == ["one", "two"]
    assert len(load_conversation(saved).turns) == 1  # the loaded file is left alone
    with pytest.raises(UsageError, match="no conversation file"):
        other.load(tmp_path / "missing.jsonl")


def test_set_options_validated(tmp_path: Path) -> None:
    chat, _ = f.session(tmp_path)
    chat.set_options(temperature=0.5, top_k=5)
    assert chat.options.sampling.temperature == 0.5 and chat.options.sampling.top_k == 5
    with pytest.raises(UsageError, match="top_p"):
        chat.set_options(top_p=2.0)
    with pytest.raises(UsageError, match="draft model"):
        chat.set_options(spec="draft")
    assert chat.options.spec == "off"


def test_unexpected_error_is_one_line(tmp_path: Path) -> None:
    chat, streams = f.session(tmp_path)
    chat.report(RuntimeError("boom"))
    out, err = streams.take()
    assert err == "error: RuntimeError: boom (rerun with --verbose for details)\n"
    assert out == ""


def test_rendering_off_a_terminal_is_plain(tmp_path: Path) -> None:
    streams = f.Streams()
    config = RenderConfig.detect(streams.out, streams.err)
    assert not config.rich and not config.markdown and not config.summary
    chat, _ = f.session(tmp_path, streams=streams)
    chat.renderer = Renderer(config, streams.out, streams.err)
    turn = chat.ask("hi")
    out, err = streams.take()
    assert turn is not None and out == turn.assistant + "\n" and err == ""
    assert "\x1b" not in out
