"""Terminal output of the chat: the streaming answer, the live status line, notes.

On a terminal (stdout and stderr both TTYs, NO_COLOR unset or empty) the answer streams inside
a rich Live region on stderr that shows the tail of the answer plus the status line; when the answer
ends the region vanishes and the finished answer is printed once to stdout, as Markdown with
highlighted code unless --plain. So stdout receives exactly the answer, the status line never
interleaves with it, and long answers cannot garble the screen (the live part is at most one
screen high). Anywhere else the answer text goes straight to stdout as it arrives: no colour,
no status line, no Markdown.

Nothing a model, a server or a file says is obeyed by the terminal: every piece of such text
passes through term.safe on its way (control characters shown as ^[ and the like), and
Markdown links are printed with their address instead of as hidden terminal hyperlinks.
Answers written to a pipe or a file stay exact.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.text import Text

from specchat.chat.conversation import Turn
from specchat.engine.events import Chunk, Finished, Progress
from specchat.engine.options import Spec
from specchat.engine.stats import Stats
from specchat.term.progress import SHOW_AFTER_SECONDS, progress_text
from specchat.term.safe import for_stream, visible

DRAFT_STYLE = "green"
LIVE_MARKDOWN_CHARS = 4000
LIVE_TAIL_CHARS = 3000
REASONS = {"length": "max_tokens reached", "context": "context full", "stop": "stop string"}


@dataclass(frozen=True)
class RenderConfig:
    rich: bool  # colours and the live status line
    markdown: bool  # render finished answers as Markdown
    show_draft: bool  # colour tokens the draft proposed and the target accepted
    summary: bool  # print the one-line summary after each answer

    @classmethod
    def detect(cls, out: TextIO, err: TextIO, *, plain: bool = False,
               show_draft: bool = False) -> RenderConfig:
        tty = _isatty(out) and _isatty(err)
        # NO_COLOR counts only when non-empty (no-color.org's wording)
        rich = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        return cls(rich=rich, markdown=rich and not plain, show_draft=rich and show_draft,
                   summary=_isatty(err))


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def speedup_estimate(stats: Stats) -> float | None:
    """Speed over plain decoding on this machine, from the plain steps this answer took (or,
    with too few, the calibrated cost of one); labelled "est." because plain decoding of this
    very answer was not run. `off` is plain decoding: exactly 1."""
    if stats.steps <= 0:
        return None
    return stats.speedup_estimate


def _speedup_label(stats: Stats) -> str | None:
    est = speedup_estimate(stats)
    if est is None:
        return None
    return "1.00x" if stats.mode == Spec.OFF else f"≈{est:.2f}x est."


def status_text(stats: Stats | None, draft_name: str | None) -> str:
    """The live line: mode, draft, current k, acceptance, tokens/step, tokens/s, speedup."""
    if stats is None:
        return "reading the prompt…"
    parts = [_mode_label(stats.mode, draft_name)]
    remote = stats.mode.startswith("remote")  # a server's figures: no k, maybe no steps
    if stats.mode != Spec.OFF and (stats.steps or not remote):
        if not remote:
            parts.append(f"k={stats.last_k}")
        acc = stats.acceptance
        parts.append(f"acc {acc:.0%}" if acc is not None else "acc –")
        parts.append(f"{stats.tokens_per_step:.2f} tok/step")
    parts.append(f"{_speed(stats.tokens_per_second)} tok/s")
    label = _speedup_label(stats)
    if label is not None:
        parts.append(label)
    return " · ".join(parts)


def summary_text(stats: Stats, draft_name: str | None, reason: str | None) -> str:
    """The compact line that stays after an answer."""
    parts = [f"{stats.generated} tok", f"{_speed(stats.tokens_per_second)} tok/s",
             _mode_label(stats.mode, draft_name)]
    if stats.drafted:
        parts.append(f"acc {stats.acceptance or 0:.0%}")
    if stats.mode not in (Spec.OFF, "remote"):
        parts.append(f"{stats.tokens_per_step:.2f} tok/step")
    label = _speedup_label(stats)
    if label is not None:
        parts.append(label)
    new = f"+{stats.prompt_tokens - stats.prompt_cached}" if stats.known("prompt_tokens") \
        else "unknown"
    parts.append(f"prompt {new} tok {stats.prompt_seconds * 1000:.0f} ms")
    if stats.first_token_seconds > 0:
        parts.append(f"first token {stats.first_token_seconds * 1000:.0f} ms")
    line = " · ".join(parts)
    return f"{line} · {REASONS[reason]}" if reason in REASONS else line


def _speed(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _mode_label(mode: str, draft_name: str | None) -> str:
    if mode in ("draft", "auto") and draft_name:
        return f"{mode} ({draft_name})"
    return mode


def markdown(text: str) -> Markdown:
    """A finished answer as Markdown for a terminal: its control characters shown, and links
    with their address in view (a terminal hyperlink could show one address and open
    another)."""
    return Markdown(visible(text), code_theme="monokai", hyperlinks=False)


class _LiveView:
    """What the Live region shows: the last screenful of the answer, then the status."""

    def __init__(self, markdown: bool) -> None:
        self.markdown = markdown
        self.text = Text()
        self.status = Text(status_text(None, None), style="dim", no_wrap=True)

    def body(self) -> Markdown | Text:
        # Only the last screenful is visible, so the cost of a refresh is bounded: Markdown
        # (which must parse the whole answer) only while the answer is short, then the plain
        # tail. The finished answer is always printed whole, as Markdown.
        if self.markdown and len(self.text) <= LIVE_MARKDOWN_CHARS:
            return Markdown(self.text.plain, hyperlinks=False)  # already made visible
        return self.text[-LIVE_TAIL_CHARS:] if len(self.text) > LIVE_TAIL_CHARS else self.text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        room = max(1, (options.height or console.height) - 2)
        lines = console.render_lines(self.body(), options.update(height=None), pad=False)
        for line in lines[-room:]:
            yield from line
            yield Segment.line()
        yield self.status


class AnswerView:
    """One answer being streamed. Use through Renderer.answer()."""

    def __init__(self, renderer: Renderer) -> None:
        self.r = renderer
        self.parts: list[str] = []
        self.stats: Stats | None = None
        self._view: _LiveView | None = None
        self._live: Live | None = None
        self._next_refresh = 0.0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def start(self) -> None:
        if self.r.config.rich:
            markdown = self.r.config.markdown and not self.r.config.show_draft
            self._view = _LiveView(markdown)
            self._live = Live(self._view, console=self.r.err_console, transient=True,
                              auto_refresh=False, redirect_stdout=False,
                              redirect_stderr=False)
            self._live.start(refresh=True)

    def chunk(self, chunk: Chunk) -> None:
        self.stats = chunk.stats
        self.parts.append(chunk.text)
        if self._live is None or self._view is None:
            if chunk.text:
                self.r.out.write(for_stream(chunk.text, self.r.out))
                self.r.out.flush()
            return
        if self.r.config.show_draft:
            for piece, drafted in self._pieces(chunk):
                self._view.text.append(visible(piece), style=DRAFT_STYLE if drafted else "")
        else:
            self._view.text.append(visible(chunk.text))
        self._view.status = Text(visible(status_text(chunk.stats, self.r.draft_name)),
                                 style="dim", no_wrap=True, overflow="ellipsis")
        self._refresh()

    def progress(self, progress: Progress) -> None:
        """The prefill's progress in the status line, once it has taken over a second."""
        if self._live is None or self._view is None or progress.seconds < SHOW_AFTER_SECONDS:
            return
        text = progress_text(progress).removeprefix("specchat: ")
        self._view.status = Text(text + "…", style="dim", no_wrap=True, overflow="ellipsis")
        self._refresh()

    def _pieces(self, chunk: Chunk) -> list[tuple[str, bool]]:
        """The chunk's text split per token, with whether the draft supplied that token.

        When the text does not split cleanly (a held-back stop string, a character spread
        over tokens) the whole chunk is coloured by its majority instead.
        """
        token_bytes = self.r.token_bytes
        if token_bytes is not None and len(chunk.tokens) == len(chunk.from_draft):
            pieces = [token_bytes(t).decode("utf-8", errors="replace") for t in chunk.tokens]
            if "".join(pieces) == chunk.text:
                return list(zip(pieces, chunk.from_draft, strict=True))
        drafted = sum(chunk.from_draft) * 2 > len(chunk.from_draft)
        return [(chunk.text, drafted)]

    def _refresh(self) -> None:
        # Refresh at most every 0.1 s, and less often when rendering itself is slow, so the
        # terminal never takes a noticeable share of the time from generation.
        now = time.monotonic()
        if self._live is None or now < self._next_refresh:
            return
        self._live.refresh()
        took = time.monotonic() - now
        self._next_refresh = now + max(0.1, 8 * took)  # rendering takes <= 1/9 of the time

    def stop(self) -> None:
        """Take the live region down (idempotent); the finished answer is printed after."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def finish(self, finished: Finished | None, interrupted: bool) -> None:
        self.stop()
        if finished is not None:
            self.stats = finished.stats
        self._print_body()
        if self.stats is not None and self.r.config.summary:
            reason = None if interrupted or finished is None else finished.reason
            line = summary_text(self.stats, self.r.draft_name, reason)
            self.r.dim(("interrupted · " if interrupted else "") + line)
        elif interrupted:
            self.r.note("interrupted")

    def _print_body(self) -> None:
        text = self.text
        if self._view is None:  # plain: the text is already out; end its line
            if text and not text.endswith("\n"):
                self.r.out.write("\n")
            self.r.out.flush()
            return
        if not text.strip():
            return
        if self._view.markdown:
            self.r.out_console.print(markdown(text))
        else:
            # soft_wrap: stdout gets the answer's own line breaks, the terminal wraps the rest
            self.r.out_console.print(self._view.text, markup=False, highlight=False,
                                     soft_wrap=True)


class Renderer:
    """Everything the chat prints goes through here (answers to stdout, the rest stderr)."""

    def __init__(self, config: RenderConfig, out: TextIO, err: TextIO,
                 draft_name: str | None = None,
                 token_bytes: Callable[[int], bytes] | None = None) -> None:
        self.config = config
        self.token_bytes = token_bytes  # for --show-draft's per-token colours
        self.out = out
        self.err = err
        self.draft_name = draft_name
        # Without rich mode the consoles are told they are no terminal: no escape codes at all.
        self.err_console = Console(file=err, force_terminal=config.rich, no_color=not config.rich,
                                   highlight=False)
        self.out_console = Console(file=out, force_terminal=config.rich, no_color=not config.rich,
                                   highlight=False)

    @contextmanager
    def answer(self) -> Iterator[AnswerView]:
        view = AnswerView(self)
        view.start()
        try:
            yield view
        finally:
            view.stop()  # never leave a live region (or a hidden cursor) behind

    def _line(self, text: str, style: str) -> None:
        if self.config.rich:
            # soft_wrap: the terminal wraps long lines, rich inserts no newlines of its own
            self.err_console.print(Text(visible(text), style=style), soft_wrap=True)
        else:
            print(for_stream(text, self.err), file=self.err, flush=True)

    def info(self, text: str) -> None:
        self._line(text, "")

    def dim(self, text: str) -> None:
        self._line(text, "dim")

    def note(self, text: str) -> None:
        self._line(text, "yellow")

    def error(self, text: str) -> None:
        self._line(f"error: {text}", "bold red")

    def lines(self, lines: list[str]) -> None:
        for line in lines:
            self.info(line)

    def replay(self, system: str, turns: Sequence[Turn], limit: int = 6) -> None:
        """Show the end of a resumed conversation (on stderr: it is not a new answer)."""
        hidden = len(turns) - limit
        if system:
            self.dim(f"system: {system}")
        if hidden > 0:
            self.dim(f"… {hidden} earlier turn{'s' if hidden > 1 else ''} not shown")
        for turn in turns[-limit:] if limit else []:
            self._line(f">>> {turn.user}", "bold")
            mark = " [interrupted]" if turn.interrupted else ""
            if self.config.markdown:
                self.err_console.print(markdown(turn.assistant))
                if mark:
                    self.dim(mark.strip())
            else:
                self._line(turn.assistant + mark, "")
