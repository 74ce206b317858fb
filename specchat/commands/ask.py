"""`specchat ask`: one answer, streamed to stdout; the shape pipelines use.

stdout carries only the answer (or one JSON object with --json); notes go to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Annotated, Optional

import typer

from specchat.commands import common as c
from specchat.config import Settings
from specchat.engine.events import Chunk, Event, Finished
from specchat.engine.options import GenerationOptions
from specchat.errors import EXIT_INTERRUPTED, UsageError
from specchat.optflags import with_options
from specchat.report import summary_line
from specchat.runtime import Backend, open_runtime


def register(app: typer.Typer) -> None:
    app.command("ask", help="Answer one prompt (argument and/or stdin) and exit.")(ask)


@with_options(c.ASK_OPTIONS)
def ask(
    prompt: Annotated[Optional[list[str]], typer.Argument(help="The prompt; stdin is read "
                      "first when it is not a terminal.", show_default=False)] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Send the text verbatim as a completion "
                   "prompt, without the chat template.")] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print a one-line summary to stderr "
                     "at the end.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (text, "
                        "tokens, finish reason, statistics) instead of the text.")] = False,
    *, settings: Settings,
) -> None:
    options = c.options_from(settings)
    text = read_prompt(prompt)
    backend: Backend = c.open_remote(settings, options) if settings["endpoint"] else \
        open_runtime(c.load_settings(settings, quiet=json_out))
    with backend:
        events = answer_events(backend, text, settings["system"], raw, options)
        finished = stream_answer(events, echo=not json_out)
    if finished is None:
        raise typer.Exit(EXIT_INTERRUPTED)
    if json_out:
        print(json.dumps(answer_json(backend, finished), ensure_ascii=False))
    if stats:
        print(summary_line(finished.stats, finished.reason), file=sys.stderr)


def read_prompt(words: list[str] | None) -> str:
    """stdin (when piped) first, then the prompt words; an empty result is a usage error."""
    parts: list[str] = []
    if not sys.stdin.isatty():
        data = sys.stdin.buffer.read()
        piped = data.decode("utf-8", errors="replace")
        if "\ufffd" in piped and b"\xef\xbf\xbd" not in data:
            print("specchat: warning: stdin is not valid UTF-8; undecodable bytes were "
                  "replaced with U+FFFD", file=sys.stderr)
        if piped.strip():
            parts.append(piped.rstrip("\n"))
    if words:
        parts.append(" ".join(words))
    text = "\n\n".join(parts)
    if not text.strip():
        raise UsageError('empty prompt: give one as an argument (specchat "...") or on stdin')
    return text


def answer_events(backend: Backend, text: str, system: str | None, raw: bool,
                  options: GenerationOptions) -> Iterator[Event]:
    """The answer to the prompt: chat-templated, or verbatim with --raw."""
    if raw:
        if system:
            raise UsageError("--system has no meaning with --raw (the text is sent verbatim)")
        return backend.complete(text, options)
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    return backend.answer(messages, options)


def stream_answer(events: Iterator[Event], echo: bool) -> Finished | None:
    """Stream chunks to stdout; None when Ctrl-C stopped the answer."""
    finished: Finished | None = None
    try:
        for event in events:
            if isinstance(event, Chunk) and echo and event.text:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Finished):
                finished = event
    except KeyboardInterrupt:
        close = getattr(events, "close", None)
        if close is not None:
            close()
        if echo:
            sys.stdout.write("\n")
        print("specchat: interrupted", file=sys.stderr)
        return None
    if echo and finished is not None and not finished.text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    return finished


def answer_json(backend: Backend, finished: Finished) -> dict[str, object]:
    auto = getattr(backend, "auto", None)  # local models only
    return {
        "text": finished.text,
        "tokens": list(finished.tokens),
        "finish_reason": finished.reason,
        "model": backend.info.target_name,
        "draft": backend.info.draft_name,
        "stats": finished.stats.to_dict(),
        "auto": auto.explain() if auto is not None and finished.stats.mode == "auto" else None,
    }
