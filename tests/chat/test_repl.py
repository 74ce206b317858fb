"""The REPL driven through prompt-toolkit's pipe input: keys, input lines, every slash command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from specchat.chat import clipboard, commands, repl
from specchat.chat.chatlog import load_conversation
from specchat.chat.commands import COMMANDS
from specchat.chat.session import ChatSession
from specchat.errors import UsageError
from tests.support import chat_fakes as f
from tests.support.replkeys import CTRL_C, CTRL_D, ENTER, ESC_ENTER, drive


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[tuple[ChatSession, f.Streams, Path]]:
    session, streams = f.session(tmp_path)
    yield session, streams, tmp_path


def users(session: ChatSession) -> list[str]:
    return [t.user for t in session.conversation.turns]


def test_a_turn_then_ctrl_d(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, tmp = chat
    assert drive(session, "hello" + ENTER + CTRL_D, tmp / "history") == 0
    out, err = streams.take()
    assert users(session) == ["hello"]
    assert out == session.conversation.turns[0].assistant + "\n"
    assert "40 tok" in err and "max_tokens reached" in err


def test_ctrl_c_on_empty_line_exits_130_and_clears_a_typed_one(chat) -> None:  # type: ignore
    session, _, tmp = chat
    assert drive(session, "half typed" + CTRL_C + "real" + ENTER + CTRL_C, None) == 130
    assert users(session) == ["real"]


def test_input_lines_persist_across_sessions(chat) -> None:  # type: ignore[no-untyped-def]
    session, _, tmp = chat
    hist = tmp / "state" / "history"
    drive(session, "first question" + ENTER + "/stats" + ENTER + CTRL_D, hist)
    assert "+first question" in hist.read_text()
    again, _ = f.session(tmp / "b")
    # Up arrow recalls the last line of the earlier session (here /stats), twice: the question.
    drive(again, "\x1b[A\x1b[A" + ENTER + CTRL_D, hist)
    assert users(again) == ["first question"]


def test_multiline_input(chat) -> None:  # type: ignore[no-untyped-def]
    session, _, _ = chat
    keys = ("one" + ESC_ENTER + "two" + ENTER
            + '"""' + ENTER + "three" + ENTER + "four" + ENTER + '"""' + ENTER
            + "\x1b[200~pasted\nlines\x1b[201~" + ENTER
            + "//slash is text" + ENTER + CTRL_D)
    assert drive(session, keys, None) == 0
    assert users(session) == ["one\ntwo", "three\nfour", "pasted\nlines", "/slash is text"]


def test_help_lists_every_command(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, _ = chat
    drive(session, "/help" + ENTER + "/help set" + ENTER + CTRL_D, None)
    _, err = streams.take()
    for cmd in COMMANDS:
        assert cmd.usage in err
    assert "/set <option> <value>  change a sampling" in err


def test_unknown_command_suggests_the_closest(chat) -> None:  # type: ignore
    session, streams, _ = chat
    assert drive(session, "/hlep" + ENTER + "/stat" + ENTER + "/zzzz" + ENTER + CTRL_D,
                 None) == 0
    _, err = streams.take()
    assert "unknown command /hlep: did you mean /help?" in err
    assert "did you mean /stats?" in err
    assert "unknown command /zzzz: (/help lists them)" in err


def test_set_validates_and_keeps_going(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, _ = chat
    keys = ("/set temp 0.7" + ENTER + "/set top-k 5" + ENTER + "/set top_p 3" + ENTER
            + "/set seed none" + ENTER + "/set stop \\n\\n" + ENTER + "/set bogus 1" + ENTER
            + "/set top_k x" + ENTER + "/set" + ENTER + "/set max_tokens" + ENTER
            + "hi" + ENTER + CTRL_D)
    assert drive(session, keys, None) == 0
    _, err = streams.take()
    opts = session.options
    assert opts.sampling.temperature == 0.7 and opts.sampling.top_k == 5
    assert opts.sampling.seed is None and opts.stop == ("\n\n",)
    assert "error: top_p must be in (0, 1]" in err
    assert "error: no option 'bogus'" in err
    assert "error: top_k needs an integer, not 'x'" in err
    assert "max_tokens = 40" in err and "repeat_last_n" in err
    assert users(session) == ["hi"]


def test_mode(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, _ = chat
    drive(session, "/mode ngram" + ENTER + "/mode draft" + ENTER + "/mode bogus" + ENTER
          + "/mode" + ENTER + CTRL_D, None)
    _, err = streams.take()
    assert session.options.spec == "ngram"
    assert "needs a draft model" in err and "/mode takes one of" in err
    assert err.rstrip().endswith("mode: ngram")


def test_mode_draft_with_a_draft_model(tmp_path: Path) -> None:
    rt = f.runtime(f.ChatModel(), draft=f.ChatModel(seed=1))
    session, streams = f.session(tmp_path, rt)
    drive(session, "/mode draft" + ENTER + "hello" + ENTER + "/stats" + ENTER + CTRL_D, None)
    _, err = streams.take()
    assert session.options.spec == "draft"
    assert "draft (fake-draft)" in err and "acc " in err
    assert "by position  1:" in err


def test_show_before_the_first_message_with_a_template_that_needs_one(chat) -> None:  # type: ignore
    session, streams, _ = chat
    render = session.runtime.chat_tokens

    def qwen_like(messages):  # type: ignore[no-untyped-def]
        if not messages:
            raise UsageError("the chat template failed: list object has no element 0")
        return render(messages)

    session.runtime.chat_tokens = qwen_like
    drive(session, "/show" + ENTER + CTRL_D, None)
    _, err = streams.take()
    assert "context   0 / 4096 tokens" in err and "error" not in err


def test_show(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, _ = chat
    drive(session, "/system be kind" + ENTER + "hi" + ENTER + "/show" + ENTER + CTRL_D, None)
    _, err = streams.take()
    assert "/models/fake.gguf" in err and "chatml-like fake template" in err
    assert "/ 4096 tokens" in err and "system    be kind" in err
    assert "temperature=0.0" in err and "draft     none" in err


def test_system(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, _ = chat
    drive(session, "/system talk like a pirate" + ENTER + "/system" + ENTER + "hi" + ENTER
          + "/system -" + ENTER + CTRL_D, None)
    _, err = streams.take()
    assert "system prompt: talk like a pirate" in err
    assert session.conversation.system == ""
    records = load_conversation(session.chatlog.path)
    assert records.system == ""


def test_clear_regen_undo(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, _ = chat
    drive(session, "one" + ENTER + "two" + ENTER + "/regen" + ENTER + "/undo" + ENTER
          + CTRL_D, None)
    assert users(session) == ["one"]
    _, err = streams.take()
    assert "answer will be the same" in err and "removed the last turn ('two')" in err
    first_file = session.chatlog.path
    drive(session, "/clear" + ENTER + "/undo" + ENTER + "/regen" + ENTER + CTRL_D, None)
    _, err = streams.take()
    assert users(session) == [] and session.chatlog.path != first_file
    assert "nothing to undo" in err and "nothing to regenerate" in err


def test_save_and_load(chat, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore
    session, streams, tmp = chat
    monkeypatch.chdir(tmp)
    target = tmp / "saved.jsonl"
    drive(session, "one" + ENTER + f"/save {target}" + ENTER + "/save" + ENTER
          + "/save notes.md" + ENTER + CTRL_D, None)
    assert [t.user for t in load_conversation(target).turns] == ["one"]
    assert list(tmp.glob("specchat-*.jsonl")) and "## You" in (tmp / "notes.md").read_text()
    other, streams2 = f.session(tmp / "b")
    drive(other, f"/load {target}" + ENTER + "two" + ENTER + "/load" + ENTER
          + f"/load {tmp}/missing.jsonl" + ENTER + CTRL_D, None)
    assert users(other) == ["one", "two"]
    _, err = streams2.take()
    assert "loaded 1 turns" in err and "/load needs a file" in err
    assert "no conversation file" in err


def test_copy(chat, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore
    session, streams, _ = chat
    copied: list[str] = []

    def fake_copy(text: str, terminal: object) -> str:
        copied.append(text)
        return "fakeclip"

    drive(session, "/copy" + ENTER + CTRL_D, None)
    assert "nothing to copy yet" in streams.take()[1]
    monkeypatch.setattr(clipboard, "copy", fake_copy)
    session.conversation.turns.append(
        __import__("specchat.chat.conversation", fromlist=["Turn"]).Turn(
            "q", "see:\n```python\nprint(1)\n```\nand\n```\nx = 2\n```\n"))
    drive(session, "/copy" + ENTER + "/copy 2" + ENTER + "/copy 3" + ENTER + "/copy x"
          + ENTER + CTRL_D, None)
    assert copied[0].startswith("see:") and copied[1] == "x = 2"
    _, err = streams.take()
    assert "copied code block 2 (5 characters) via fakeclip" in err
    assert "has 2 code blocks" in err and "code block number" in err


def test_copy_without_any_clipboard_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clipboard, "_tools", list)
    with pytest.raises(OSError, match="no clipboard available"):
        clipboard.copy("x", None)
    monkeypatch.setattr(clipboard.shutil, "which", lambda name: None)
    monkeypatch.setattr(clipboard, "_tools", lambda: [["xclip"]])

    class Tty:
        data = ""

        def isatty(self) -> bool:
            return True

        def write(self, s: str) -> None:
            self.data += s

        def flush(self) -> None:
            pass

    tty = Tty()
    assert "OSC 52" in clipboard.copy("hi", tty)  # type: ignore[arg-type]
    assert tty.data.endswith("]52;c;aGk=\x07")


def test_stats(chat) -> None:  # type: ignore[no-untyped-def]
    session, streams, _ = chat
    drive(session, "/stats" + ENTER + "hi" + ENTER + "again" + ENTER + "/stats" + ENTER
          + CTRL_D, None)
    _, err = streams.take()
    assert "no answers yet" in err
    assert "answers      2 (0 interrupted)" in err and "prompt eval  #1" in err


def test_bye_and_aliases(chat) -> None:  # type: ignore[no-untyped-def]
    session, _, _ = chat
    assert drive(session, "/bye" + ENTER + "never" + ENTER, None) == 0
    assert drive(session, "/quit" + ENTER, None) == 0
    assert users(session) == []


def test_completion_comes_from_the_table(chat) -> None:  # type: ignore[no-untyped-def]
    session, _, _ = chat
    completer = repl.SlashCompleter(session)

    def complete(text: str) -> list[str]:
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]

    assert complete("/") == [c.name for c in COMMANDS]
    assert complete("/s") == ["set", "show", "system", "save", "save!", "save-settings",
                              "stats"]
    assert "temperature" in complete("/set te") and complete("/set spec ") == [
        "auto", "draft", "ngram", "off"]
    assert complete("/mode d") == ["draft"]
    assert complete("hello /") == []


def test_unexpected_error_in_a_command_is_one_line(chat, monkeypatch) -> None:  # type: ignore
    session, streams, _ = chat

    def boom(session: ChatSession, arg: str) -> None:
        raise RuntimeError("kaput")

    table = tuple(commands.Command(c.name, c.args, c.help, boom if c.name == "stats"
                                   else c.handler) for c in COMMANDS)
    monkeypatch.setattr(commands, "COMMANDS", table)
    assert drive(session, "/stats" + ENTER + "hi" + ENTER + CTRL_D, None) == 0
    _, err = streams.take()
    assert "error: RuntimeError: kaput (rerun with --verbose for details)" in err
    assert "Traceback" not in err and users(session) == ["hi"]
