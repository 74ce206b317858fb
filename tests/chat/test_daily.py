"""The REPL's daily-driver commands through prompt-toolkit's pipe input: /read, /set and
/show from the options schema, /save-settings, /model and /draft, Ctrl-R, private history."""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest

from specchat.backend.loading import wants_draft
from specchat.backend.local import Runtime
from specchat.backend.remote import RemoteRuntime
from specchat.chat.chatlog import load_conversation
from specchat.errors import UsageError
from specchat.settings.load import LoadSettings
from tests.support import chat_fakes as f
from tests.support.replkeys import CTRL_D, ENTER, drive

CTRL_R = "\x12"


def test_read_attaches_to_the_next_message_only(tmp_path: Path) -> None:
    session, streams = f.session(tmp_path)
    (tmp_path / "notes.txt").write_text("some ``` backticks\nand text\n")
    keys = ("/read " + str(tmp_path / "notes.txt") + ENTER + "what is this" + ENTER
            + "and now" + ENTER + "/stats" + ENTER + CTRL_D)
    assert drive(session, keys, None) == 0
    _, err = streams.take()
    first, second = session.conversation.turns
    assert [a.name for a in first.attachments] == [str(tmp_path / "notes.txt")]
    assert first.user == "what is this" and second.attachments == []
    # Fenced with more backticks than the file holds, then the question.
    assert first.message == (f"File: {tmp_path / 'notes.txt'}\n````\nsome ``` backticks\n"
                             "and text\n````\n\nwhat is this")
    tokens = len(f.encode(first.attachments[0].block()))
    assert f"attached {tmp_path / 'notes.txt'} ({tokens} tokens)" in err
    assert f"attachments: {tokens} tokens read this session; 1 file in the conversation" in err
    # What was attached is in the conversation file: a resumed chat sends it again.
    saved = load_conversation(session.chatlog.path).turns[0]
    assert saved.attachments == first.attachments and saved.message == first.message


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"\x7fELF\x00\x01"), "looks binary"),
    (lambda p: p.write_bytes(b"caf\xe9 latin-1"), "is not UTF-8 text"),
    (lambda p: p.write_text("word " * 5000), "does not fit in a context of 4096"),
])
def test_read_refuses_bad_files_and_the_chat_goes_on(tmp_path: Path, setup: Any,
                                                     message: str) -> None:
    session, streams = f.session(tmp_path)
    target = tmp_path / "thing"
    setup(target)
    assert drive(session, f"/read {target}" + ENTER + "hi" + ENTER + CTRL_D, None) == 0
    _, err = streams.take()
    assert f"error: {target}: " in err and message in err
    assert [t.user for t in session.conversation.turns] == ["hi"]
    assert session.conversation.turns[0].attachments == [] and session.pending == []


def test_set_and_show_come_from_the_schema(tmp_path: Path) -> None:
    session, streams = f.session(tmp_path)
    keys = ("/set plain true" + ENTER + "/set system be brief" + ENTER + "/set spec ngram"
            + ENTER + "/set ctx 100" + ENTER + "/set model x" + ENTER + "/set seed -1" + ENTER
            + "/set" + ENTER + "/show" + ENTER + CTRL_D)
    drive(session, keys, None)
    _, err = streams.take()
    assert session.plain and session.conversation.system == "be brief"
    assert session.options.spec == "ngram" and session.options.sampling.seed is None
    assert "error: ctx cannot change mid-chat (set --ctx" in err
    assert "error: model cannot change mid-chat (/model and /draft switch models" in err
    from specchat.settings.schema import OPTIONS

    for opt in OPTIONS:  # /set lists exactly the live options
        assert (f"  {opt.name:<15} " in err) == opt.live
    assert "spec=ngram" in err and "plain=true" in err and "max_tokens=40" in err


def test_save_settings_keeps_comments_and_profiles(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.toml"
    config.write_text("# mine\ntop_k = 7  # keep?\nctx = 2048\n\n[profile.code]\n"
                      "# careful\ntemperature = 0.1\n")
    monkeypatch.setenv("SPECCHAT_CONFIG", str(config))
    session, streams = f.session(tmp_path)
    drive(session, "/set temp 0.5" + ENTER + "/set top_k 0" + ENTER + "/set stop END"
          + ENTER + "/save-settings" + ENTER + CTRL_D, None)
    _, err = streams.take()
    text = config.read_text()
    data = tomllib.loads(text)
    assert "# mine" in text and "# careful" in text
    assert data["temperature"] == 0.5 and data["stop"] == ["END"]
    assert data["max_tokens"] == 40  # the session's value differs from the default 1024
    assert "top_k" not in data  # back at its default: the key goes, the default applies
    assert data["ctx"] == 2048  # not a live option: left as the user wrote it
    assert data["profile"]["code"] == {"temperature": 0.1}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert f"saved 4 settings to {config}" in err


def test_save_settings_with_a_remote_server_writes_the_options_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/save-settings in a chat with --endpoint: the server's models are its own, so the
    file gets the live options and no model (this was an AttributeError)."""
    config = tmp_path / "config.toml"
    monkeypatch.setenv("SPECCHAT_CONFIG", str(config))
    remote = RemoteRuntime("http://127.0.0.1:9/v1", None, "their-model", f.options())
    session, streams = f.session(tmp_path, rt=remote)
    drive(session, "/set temp 0.5" + ENTER + "/save-settings" + ENTER + CTRL_D, None)
    _, err = streams.take()
    data = tomllib.loads(config.read_text())
    assert data["temperature"] == 0.5 and "model" not in data and "draft" not in data
    assert "error" not in err and f"to {config}" in err


class Loadable(f.ChatModel):
    closed = False

    def close(self) -> None:
        self.closed = True


def fake_open(loaded: list[str]) -> Any:
    """open_runtime on fake models named by seed ("7"); "broken" fails to load."""
    def open_fake(settings: LoadSettings, reuse: Runtime | None = None) -> Runtime:
        def get(name: str, old: Any) -> Any:
            if old is not None and getattr(old, "name", None) == name:
                return old
            if name == "broken":
                raise UsageError("broken: not a GGUF file")
            loaded.append(name)
            model = Loadable(seed=int(name))
            model.name = name  # type: ignore[attr-defined]
            return model

        target = get(settings.model or "1", reuse.target if reuse else None)
        draft_name = wants_draft(settings) if settings.draft else None
        draft = get(draft_name, reuse.draft if reuse else None) if draft_name else None
        runtime = f.runtime(target, draft)
        runtime.info.target_name = settings.model or "1"
        runtime.info.draft_name = draft_name
        runtime.settings = settings
        runtime.reopen = open_fake
        runtime.closers = [m.close for m in (target, draft)
                           if m is not None and (reuse is None or m not in
                                                 (reuse.target, reuse.draft))]
        return runtime
    return open_fake


def test_model_and_draft_switch_keeps_the_conversation(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []
    first = fake_open(loaded)(LoadSettings(model="1", spec="off"))
    session, streams = f.session(tmp_path, rt=first)
    old_target = session.runtime.target
    keys = ("hello" + ENTER + "/model broken" + ENTER + "/model 2" + ENTER + "again" + ENTER
            + "/draft 3" + ENTER + "/draft none" + ENTER + CTRL_D)
    assert drive(session, keys, None) == 0
    _, err = streams.take()
    assert "error: broken: not a GGUF file; still using 1" in err
    assert loaded == ["1", "2", "3"] and old_target.closed  # type: ignore[attr-defined]
    assert "now 2 · mode off · the conversation" in err
    assert "now 2 + draft 3 · mode draft" in err and "now 2 · mode auto" in err
    turns = session.conversation.turns
    assert [t.user for t in turns] == ["hello", "again"]
    # The second answer is what model 2 says after the whole conversation, re-read by it.
    target = session.runtime.target
    assert target is not old_target and not target.closed  # type: ignore[attr-defined]
    fresh = f.ChatModel(seed=2)
    from specchat.engine.build import generate

    tokens = f.chat_tokens(session.conversation.messages()[:-1])
    want = list(generate(fresh, tokens, f.options()))[-1]
    assert turns[1].assistant == want.text  # type: ignore[attr-defined]
    records = [line for line in session.chatlog.path.read_text().splitlines() if '"models"' in line]
    assert len(records) == 3 and '"model": "2"' in records[0]


@pytest.mark.parametrize("asked", ["/mode draft", "/set spec draft"])
def test_draft_mode_loads_the_draft_auto_left_out(tmp_path: Path, asked: str) -> None:
    loaded: list[str] = []
    first = fake_open(loaded)(LoadSettings(model="1", spec="auto"))
    first.settings = LoadSettings(model="1", draft="3", spec="auto", draft_on_demand=True)
    first.info.draft_not_loaded = "draft 3 not loaded: its step costs 0.54 of a target step"
    session, streams = f.session(tmp_path, rt=first)
    session.set_options(spec="auto")
    keys = "/show" + ENTER + "hello" + ENTER + asked + ENTER + "again" + ENTER + "/show" + ENTER
    assert drive(session, keys + CTRL_D, None) == 0
    _, err = streams.take()
    assert loaded == ["1", "3"] and session.options.spec == "draft"
    assert "draft     none (draft 3 not loaded: its step costs 0.54" in err
    assert "now 1 + draft 3 · mode draft" in err and "draft     3" in err
    assert session.runtime.target is first.target  # the conversation's cache stays
    assert [t.user for t in session.conversation.turns] == ["hello", "again"]


def test_ctrl_r_searches_the_prompt_history(tmp_path: Path) -> None:
    hist = tmp_path / "state" / "history"
    session, _ = f.session(tmp_path)
    drive(session, "apples are red" + ENTER + "bananas are yellow" + ENTER + CTRL_D, hist)
    assert stat.S_IMODE(hist.stat().st_mode) == 0o600
    assert stat.S_IMODE(hist.parent.stat().st_mode) == 0o700
    again, _ = f.session(tmp_path / "b")
    # Ctrl-R, type part of an old line, Enter takes it into the prompt, Enter sends it.
    drive(again, CTRL_R + "apples" + ENTER + ENTER + CTRL_D, hist)
    assert [t.user for t in again.conversation.turns] == ["apples are red"]
    # Ctrl-C in a search ends the search, not the chat.
    third, _ = f.session(tmp_path / "c")
    assert drive(third, CTRL_R + "ban" + "\x03" + "kiwi" + ENTER + CTRL_D, hist) == 0
    assert [t.user for t in third.conversation.turns] == ["kiwi"]


def test_an_existing_history_file_is_made_private(tmp_path: Path) -> None:
    hist = tmp_path / "history"
    hist.write_text("\n# 2026-01-01\n+old line\n")
    hist.chmod(0o644)
    session, _ = f.session(tmp_path)
    drive(session, CTRL_D, hist)
    assert stat.S_IMODE(hist.stat().st_mode) == 0o600 and "+old line" in hist.read_text()
