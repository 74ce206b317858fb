"""Rendering: status and summary lines, terminal vs pipe, Markdown, --show-draft colours."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from specchat.chat.render import (
    RenderConfig,
    Renderer,
    speedup_estimate,
    status_text,
    summary_text,
)
from specchat.engine.events import Chunk, Finished
from specchat.engine.stats import Stats
from tests.support import chat_fakes as f


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


STATS = Stats(mode="draft", prompt_tokens=50, prompt_cached=40, prompt_seconds=0.02,
              generated=30, steps=10, steps_drafted=8, steps_empty=2, drafted=32,
              accepted=20, decode_seconds=1.5, verify_seconds=1.5, last_k=4,
              plain_step_seconds=0.1)


def test_status_line_has_every_figure() -> None:
    line = status_text(STATS, "qwen-0.5b")
    # 20 tok/s against a measured plain step of 0.1 s (10 tok/s): twice as fast.
    assert line == ("draft (qwen-0.5b) · k=4 · acc 62% · 3.00 tok/step · 20.0 tok/s · "
                    "≈2.00x est.")
    assert status_text(None, None) == "reading the prompt…"
    off = Stats(mode="off", generated=5, steps=5, decode_seconds=1.0)
    assert status_text(off, None) == "off · 5.0 tok/s · 1.00x"  # plain is its own baseline
    assert speedup_estimate(off) == 1.0
    unmeasured = Stats(mode="auto", generated=5, steps=5, decode_seconds=1.0)
    assert speedup_estimate(unmeasured) is None  # no measured plain step: no number


def test_summary_line() -> None:
    line = summary_text(STATS, "qwen-0.5b", "length")
    assert line == ("30 tok · 20.0 tok/s · draft (qwen-0.5b) · acc 62% · 3.00 tok/step · "
                    "≈2.00x est. · prompt +10 tok 20 ms · max_tokens reached")
    assert summary_text(STATS, None, "eog").endswith("prompt +10 tok 20 ms")


def test_detect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert RenderConfig.detect(Tty(), Tty()) == RenderConfig(True, True, False, True)
    assert RenderConfig.detect(Tty(), Tty(), plain=True, show_draft=True) == RenderConfig(
        True, False, True, True)
    assert RenderConfig.detect(io.StringIO(), Tty()) == RenderConfig(False, False, False, True)
    monkeypatch.setenv("NO_COLOR", "1")
    assert RenderConfig.detect(Tty(), Tty(), show_draft=True) == RenderConfig(
        False, False, False, True)
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: the convention says it does not count
    assert RenderConfig.detect(Tty(), Tty()) == RenderConfig(True, True, False, True)


def _rich_session(tmp: Path, **config: bool) -> tuple[object, Tty, Tty]:
    out, err = Tty(), Tty()
    chat, _ = f.session(tmp)
    rt = chat.runtime
    cfg = RenderConfig(rich=True, markdown=config.get("markdown", True),
                       show_draft=config.get("show_draft", False), summary=True)
    chat.renderer = Renderer(cfg, out, err, token_bytes=rt.target.token_bytes)
    return chat, out, err


def test_terminal_answer_is_markdown_on_stdout_status_on_stderr(tmp_path: Path,
                                                                  monkeypatch) -> None:  # type: ignore
    chat, out, err = _rich_session(tmp_path)
    answer = "# Title\n\n```python\nprint('hi')\n```\n"
    stats = Stats(mode="off", generated=3, steps=3, decode_seconds=0.1)
    events = [Chunk(answer[:10], (1,), (False,), stats),
              Chunk(answer[10:], (2,), (False,), stats), Finished("eog", answer, (1, 2), stats)]
    # Runtime.stream returns a generator (consumers close it): so does this stand-in.
    monkeypatch.setattr(chat.runtime, "stream",  # type: ignore[attr-defined]
                        lambda tokens, options, **kw: (e for e in events))
    turn = chat.ask("hi")  # type: ignore[attr-defined]
    assert turn.assistant == answer
    printed = out.getvalue()
    assert "Title" in printed and "print" in printed and "```" not in printed
    assert "\x1b[" in printed  # coloured / highlighted
    status = err.getvalue()
    assert "3 tok" in status and "Title" not in status.split("3 tok")[-1]


def test_show_draft_colours_drafted_tokens(tmp_path: Path) -> None:
    chat, out, err = _rich_session(tmp_path, show_draft=True)
    rt = f.runtime(f.ChatModel(), draft=f.ChatModel())
    chat.runtime = rt  # type: ignore[attr-defined]
    chat.renderer.token_bytes = rt.target.token_bytes  # type: ignore[attr-defined]
    chat.options = chat.options.with_values(spec="draft", draft_max=3)  # type: ignore
    turn = chat.ask("hello")  # type: ignore[attr-defined]
    assert turn is not None
    printed = out.getvalue()
    assert "\x1b[32m" in printed  # the draft's (accepted) tokens are green
    plain = __import__("re").sub(r"\x1b\[[0-9;]*m", "", printed)
    assert plain.strip() == turn.assistant.strip()


def test_prefill_progress_shows_in_the_status_line(tmp_path: Path, monkeypatch) -> None:  # type: ignore
    from specchat.engine.events import Finished, Progress

    chat, out, err = _rich_session(tmp_path)
    stats = Stats(mode="off", generated=1, steps=1, decode_seconds=0.1)

    def stream(tokens, options, progress=None, tools=None):  # type: ignore[no-untyped-def]
        progress(Progress(512, 3000, 0.5))  # under a second: not shown
        progress(Progress(1024, 3000, 2.0))
        yield Chunk("ok", (1,), (False,), stats)
        yield Finished("eog", "ok", (1,), stats)

    monkeypatch.setattr(chat.runtime, "stream", stream)
    assert chat.ask("hi").assistant == "ok"  # type: ignore[attr-defined]
    status = err.getvalue()
    assert "reading the prompt 1024/3000 tokens (34%, 512 tok/s)" in status
    assert "512/3000" not in status
