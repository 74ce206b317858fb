"""`specchat history` and its subcommands through the CLI: list, search, show, rm, export."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from specchat.chat.attach import Attachment
from specchat.chat.chatlog import ChatLog, conversations_dir
from specchat.chat.conversation import Turn
from tests.support.clirun import FakeStdin, run_cli


class Terminal(FakeStdin):
    """A terminal whose user answers `reply` to a question."""

    def __init__(self, reply: str) -> None:
        super().__init__(b"", tty=True)
        self.reply = reply

    def readline(self) -> str:
        return self.reply + "\n"


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", FakeStdin(b""))
    paths = {}
    for stem, turns, when in [
        ("20260101-100000", [Turn("How do I reverse a list?", "Use reversed(xs).")], 100),
        ("20260101-100500", [Turn("what is in it?", "It prints NEEDLE twice.",
                                  attachments=[Attachment("a.py", "print('needle')\n")])], 200),
        ("20260102-090000", [Turn("first", "one"), Turn("Second needle here", "two")], 300),
    ]:
        path = conversations_dir() / f"{stem}.jsonl"
        chatlog = ChatLog(path, meta={"model": "smollm2-135m", "draft": None})
        for turn in turns:
            chatlog.append({"type": "turn", **turn.to_dict()})
        os.utime(path, (when, when))
        paths[stem] = path
    return paths


def test_bare_history_lists_newest_first(saved: dict[str, Path], capsys: Any) -> None:
    code, out, _ = run_cli(["history"], capsys)
    ids = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")]
    assert code == 0 and ids == ["20260102-090000", "20260101-100500", "20260101-100000"]
    code, out, _ = run_cli(["history", "-n", "1"], capsys)
    assert "20260102-090000" in out and "20260101" not in out


def test_search_newest_first_with_the_matching_line(saved: dict[str, Path], capsys: Any
                                                    ) -> None:
    code, out, err = run_cli(["history", "search", "needle"], capsys)
    assert code == 0 and out.splitlines() == [
        "20260102-090000  turn 2  you: Second needle here",
        "20260101-100500  turn 1  file a.py: print('needle')",
        "20260101-100500  turn 1  assistant: It prints NEEDLE twice.",
    ]
    _, out, err = run_cli(["history", "search", "zebra"], capsys)
    assert code == 0 and out == "" and "nothing matches 'zebra'" in err


@pytest.mark.parametrize("ident", ["last", "20260102", "20260102-090000", "20260102-090000.jsonl"])
def test_show_by_prefix_or_last(saved: dict[str, Path], capsys: Any, ident: str) -> None:
    code, out, _ = run_cli(["history", "show", ident], capsys)
    assert code == 0 and out.startswith("# 20260102-090000\n")
    assert "Second needle here" in out and "*model: smollm2-135m*" in out


def test_show_includes_attached_files(saved: dict[str, Path], capsys: Any) -> None:
    code, out, _ = run_cli(["history", "show", "20260101-1005"], capsys)
    assert "File: a.py\n```\nprint('needle')\n```\n\nwhat is in it?" in out


@pytest.mark.parametrize("ident, message", [
    ("2026", "'2026' matches 3 conversations"),
    ("20260101", "'20260101' matches 2 conversations"),
    ("1999", "no conversation '1999'"),
])
def test_ambiguous_or_unknown_id_is_one_line_exit_2(saved: dict[str, Path], capsys: Any,
                                                    ident: str, message: str) -> None:
    for sub in (["show"], ["export"], ["rm", "--yes"]):
        code, out, err = run_cli(["history", *sub, ident], capsys)
        assert code == 2 and out == "" and message in err and err.count("\n") == 1
    assert len(list(conversations_dir().iterdir())) == 3


def test_rm_asks_in_a_terminal_and_never_silently(saved: dict[str, Path], capsys: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = saved["20260101-100000"]
    code, _, err = run_cli(["history", "rm", "20260101-10000"], capsys)  # not a terminal
    assert code == 2 and "--yes" in err and path.exists()
    monkeypatch.setattr("sys.stdin", Terminal("n"))
    code, _, err = run_cli(["history", "rm", "20260101-10000"], capsys)
    assert code == 0 and "delete 20260101-100000 (1 turns" in err
    assert "nothing deleted" in err and path.exists()
    monkeypatch.setattr("sys.stdin", Terminal("y"))
    code, _, err = run_cli(["history", "rm", "20260101-10000"], capsys)
    assert code == 0 and "deleted 20260101-100000" in err and not path.exists()
    monkeypatch.setattr("sys.stdin", FakeStdin(b""))
    code, _, _ = run_cli(["history", "rm", "--yes", "last"], capsys)
    assert code == 0 and not saved["20260102-090000"].exists()


def test_export_markdown_json_and_never_overwrite(saved: dict[str, Path], capsys: Any,
                                                  tmp_path: Path) -> None:
    code, out, _ = run_cli(["history", "export", "last"], capsys)
    assert code == 0 and out.startswith("# 20260102-090000") and "## Assistant" in out
    code, out, _ = run_cli(["history", "export", "20260101-1005", "--format", "json"], capsys)
    data = json.loads(out)
    assert data["id"] == "20260101-100500" and data["meta"]["model"] == "smollm2-135m"
    assert data["turns"][0]["attachments"] == [{"name": "a.py", "text": "print('needle')\n"}]
    target = tmp_path / "out.md"
    target.write_text("mine")
    code, _, err = run_cli(["history", "export", "last", "-o", str(target)], capsys)
    assert code == 2 and "exists: pass --force" in err and target.read_text() == "mine"
    code, out, _ = run_cli(["history", "export", "last", "-o", str(target), "--force"], capsys)
    assert code == 0 and out == "" and target.read_text().startswith("# 20260102-090000")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # it holds the user's words
    code, _, err = run_cli(["history", "export", "last", "--format", "pdf"], capsys)
    assert code == 2 and "markdown, json" in err


def test_rm_removes_the_conversations_answers_from_the_drafting_store(
        saved: dict[str, Path], capsys: Any) -> None:
    """After `history rm`, asking again drafts nothing from what that conversation said."""
    from specchat.backend.draftstore import DraftStore, tag_of
    from specchat.engine.cost import AcceptanceModel, CostTable
    from specchat.engine.storedraft import StoreDrafter
    from specchat.paths import draft_store_dir

    answer = [int(b) for b in b"Use reversed(xs)."]
    other = [int(b) for b in b"one"]
    store = DraftStore(draft_store_dir(), "v" * 16, 1 << 20)
    store.append([7, 7, *answer, 0], tag_of("Use reversed(xs)."))
    store.append([8, 8, *other, 0], tag_of("one"))

    def plan() -> tuple[int, ...]:
        index = DraftStore(draft_store_dir(), "v" * 16, 1 << 20).index(256)
        gpu = CostTable.from_ratios(0.02, [1 + 0.03 * i for i in range(20)])
        drafter = StoreDrafter(index, lambda key: AcceptanceModel(0.95), gpu, branches=1)
        return drafter.propose([5, *answer[:6]], 8).tokens

    assert plan()  # the answer drafts itself back before the deletion
    code, _, err = run_cli(["history", "rm", "20260101-100000", "--yes"], capsys)
    assert code == 0 and "removed 1 of its answers from the drafting store" in err
    assert not plan()
    code, out, _ = run_cli(["history", "store"], capsys)
    assert code == 0 and "1 answers" in out and str(draft_store_dir()) in out


def test_store_clear_deletes_every_kept_answer(saved: dict[str, Path], capsys: Any) -> None:
    from specchat.backend.draftstore import DraftStore
    from specchat.paths import draft_store_dir

    DraftStore(draft_store_dir(), "v" * 16, 1 << 20).append([1, 2, 3], 1)
    code, _, err = run_cli(["history", "store", "--clear"], capsys)
    assert code == 2 and "--yes" in err
    code, _, err = run_cli(["history", "store", "--clear", "--yes"], capsys)
    assert code == 0 and "deleted 1 answers" in err
    code, out, _ = run_cli(["history", "store"], capsys)
    assert "(empty)" in out


def test_store_shows_and_clears_serves_stores_of_its_clients(saved: dict[str, Path],
                                                             capsys: Any) -> None:
    from specchat.backend.draftstore import DraftStore
    from specchat.paths import serve_store_dir

    for client in ("a" * 32, "b" * 32):
        DraftStore(serve_store_dir() / client, "v" * 16, 1 << 20).append([1, 2, 3], 1)
    code, out, _ = run_cli(["history", "store"], capsys)
    assert code == 0 and "2 clients, 2 answers" in out and str(serve_store_dir()) in out
    code, _, err = run_cli(["history", "store", "--clear", "--yes"], capsys)
    assert code == 0 and "deleted 2 answers" in err
    # Only the empty lock files stay (a concurrent merge may hold one): no client's words.
    left = [f for f in serve_store_dir().rglob("*") if f.is_file()]
    assert all(f.name == ".lock" and f.stat().st_size == 0 for f in left)
    code, out, _ = run_cli(["history", "store"], capsys)
    assert "clients" not in out
