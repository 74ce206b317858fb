"""`specchat ask`: one answer, streamed to stdout; the shape pipelines use.

stdout carries only the answer (or one JSON object with --json); notes go to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from specchat.commands import common as c
from specchat.config import Settings
from specchat.engine.events import Chunk, Finished
from specchat.engine.options import GenerationOptions
from specchat.errors import EXIT_INTERRUPTED, UsageError
from specchat.optflags import with_options
from specchat.report import summary_line
from specchat.runtime import Runtime, open_runtime

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
    with open_runtime(c.load_settings(settings, quiet=json_out)) as runtime:
        tokens = prompt_tokens(runtime, text, settings["system"], raw)
        finished = stream_answer(runtime, tokens, options, echo=not json_out)
    if finished is None:
        raise typer.Exit(EXIT_INTERRUPTED)
    if json_out:
        print(json.dumps(answer_json(runtime, finished), ensure_ascii=False))
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


def prompt_tokens(runtime: Runtime, text: str, system: str | None, raw: bool) -> list[int]:
    """Tokens of the prompt; refuses one that leaves no room in the context for an answer."""
    if raw:
        if system:
            raise UsageError("--system has no meaning with --raw (the text is sent verbatim)")
        tokens = runtime.raw_tokens(text)
    else:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": text})
        tokens = runtime.chat_tokens(messages)
    n_ctx = runtime.target.n_ctx
    if len(tokens) >= n_ctx:
        over = len(tokens) - n_ctx + 1
        raise UsageError(f"prompt is {len(tokens)} tokens, {over} over what a context of "
                         f"{n_ctx} leaves for an answer: raise --ctx or shorten the prompt")
    return tokens


def stream_answer(runtime: Runtime, tokens: list[int], options: GenerationOptions,
                  echo: bool) -> Finished | None:
    """Stream chunks to stdout; None when Ctrl-C stopped the answer."""
    events = runtime.stream(tokens, options)
    finished: Finished | None = None
    try:
        for event in events:
            if isinstance(event, Chunk) and echo and event.text:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Finished):
                finished = event
    except KeyboardInterrupt:
        events.close()
        if echo:
            sys.stdout.write("\n")
        print("specchat: interrupted", file=sys.stderr)
        return None
    if echo and finished is not None and not finished.text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    return finished


def answer_json(runtime: Runtime, finished: Finished) -> dict[str, object]:
    return {
        "text": finished.text,
        "tokens": list(finished.tokens),
        "finish_reason": finished.reason,
        "model": runtime.info.target_name,
        "draft": runtime.info.draft_name,
        "stats": finished.stats.to_dict(),
        "auto": runtime.auto.explain() if finished.stats.mode == "auto" else None,
    }
