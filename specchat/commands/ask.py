"""`specchat ask`: one answer, streamed to stdout; the shape pipelines use.

stdout carries only the answer (or one JSON object with --json); notes go to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Optional

import typer

from specchat.backend.base import Backend, Events, Message, ProgressCallback
from specchat.backend.loading import open_runtime
from specchat.backend.local import positions_for
from specchat.backend.promptcache import PromptCache
from specchat.chat.attach import Attachment, compose, measure, read_files
from specchat.commands import common as c
from specchat.engine.events import Chunk, Finished, drain
from specchat.engine.options import GenerationOptions
from specchat.errors import EXIT_INTERRUPTED, SpecchatError, UsageError
from specchat.paths import prompt_cache_dir
from specchat.settings.file import Settings
from specchat.settings.flags import with_options
from specchat.settings.load import LoadSettings
from specchat.settings.schema import parse_size
from specchat.term import output
from specchat.term.progress import PrefillProgress
from specchat.term.safe import note
from specchat.term.summary import summary_line


def register(app: typer.Typer) -> None:
    app.command("ask", help="Answer one prompt (argument and/or stdin) and exit.")(ask)


@with_options(c.ASK_OPTIONS)
def ask(
    prompt: Annotated[Optional[list[str]], typer.Argument(help="The prompt; stdin is read "
                      "first when it is not a terminal.", show_default=False)] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Send the text verbatim as a completion "
                   "prompt, without the chat template; special-token text in it (e.g. "
                   "<|im_start|>) becomes those tokens.")] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print a one-line summary to stderr "
                     "at the end.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (text, "
                        "tokens, finish reason, statistics) instead of the text.")] = False,
    files: c.FilesFlag = None,
    *, settings: Settings,
) -> None:
    options = c.options_from(settings)
    attached = read_files(files or [])
    text = read_prompt(prompt, stdin_free="-" not in (files or []), files=bool(attached))
    if raw and settings["system"]:
        raise UsageError("--system has no meaning with --raw (the text is sent verbatim)")
    run = _ask_remote if settings["endpoint"] else _ask_local
    finished, backend, counts = run(settings, options, attached, text, raw, not json_out)
    if finished is None:
        raise typer.Exit(EXIT_INTERRUPTED)
    problem = structure_problem(finished, options)
    if json_out:
        out = answer_json(backend, finished)
        out["attachments"] = [{"name": a.name, "tokens": n}
                              for a, n in zip(attached, counts, strict=True)]
        output.write(json.dumps(out, ensure_ascii=False) + "\n")
    if stats:
        note(summary_line(finished.stats, finished.reason))
        if attached:
            note(attachments_line(attached, counts))
    if problem:
        raise SpecchatError(problem)


def structure_problem(finished: Finished, options: GenerationOptions) -> str | None:
    """What is wrong with a structured answer (--format json, --schema), in one line; None
    when it is whole and valid. The grammar makes every answer a prefix of a valid one, so
    what can go wrong is an answer cut short, or a schema keyword it could not enforce."""
    structure = options.structure
    if structure is None or structure.kind == "grammar":
        return None
    if finished.reason in ("length", "context"):
        limit = "--max-tokens" if finished.reason == "length" else "--ctx"
        return (f"the answer ran out of tokens before its JSON was complete "
                f"({finished.stats.generated} tokens): raise {limit}")
    try:
        value = json.loads(finished.text)
    except ValueError as exc:
        return f"the answer is not complete JSON ({exc}; finish reason {finished.reason})"
    except RecursionError:
        return "the answer's JSON nests too deeply to be read"
    if structure.kind != "json_schema":
        return None
    # The schema passed llm/schemacheck when --schema or /set schema read it (settings/
    # structure.py): its patterns run on RE2 and its references stay inside it.
    from specchat.llm import schemacheck

    problem = schemacheck.first_error(schemacheck.validator(json.loads(structure.text)), value)
    return None if problem is None else f"the answer does not match the schema {problem}"


def attachments_line(attached: list[Attachment], counts: list[int | None]) -> str:
    if any(n is None for n in counts):  # counted by a remote server, not here
        return f"attachments: {', '.join(a.name for a in attached)}"
    names = ", ".join(f"{a.name} {n} tok" for a, n in zip(attached, counts, strict=True))
    return f"attachments: {sum(n or 0 for n in counts)} tokens ({names})"


def read_prompt(words: list[str] | None, stdin_free: bool = True, files: bool = False) -> str:
    """stdin (when piped and not attached with -f -) first, then the prompt words; an empty
    result is a usage error unless files were attached (they are the message then)."""
    parts: list[str] = []
    if stdin_free and not sys.stdin.isatty():
        data = c.read_piped()
        piped = data.decode("utf-8", errors="replace")
        if "\ufffd" in piped and b"\xef\xbf\xbd" not in data:
            print("specchat: warning: stdin is not valid UTF-8; undecodable bytes were "
                  "replaced with U+FFFD", file=sys.stderr)
        if piped.strip():
            parts.append(piped.rstrip("\n"))
    if words:
        parts.append(" ".join(words))
    text = "\n\n".join(parts)
    if not text.strip() and not files:
        raise UsageError('empty prompt: give one as an argument (specchat "...") or on stdin')
    return text


def messages_for(text: str, system: str | None) -> list[Message]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    return messages


Answer = tuple[Finished | None, Backend, list[int | None]]


def _ask_local(settings: Settings, options: GenerationOptions, attached: list[Attachment],
               text: str, raw: bool, echo: bool) -> Answer:
    """Local models: the prompt cache, attachment token counts, the context check."""
    # The prompt cache keeps the prompt's KV states on disk: private mode writes none.
    cache_limit = 0 if settings["private"] else parse_size(settings["prompt_cache"])
    message = compose(attached, text)
    messages = None if raw else messages_for(message, settings["system"])
    loading = replace(LoadSettings.from_settings(settings, quiet=not echo),
                      draft_on_demand=True,
                      ctx_start=positions_for([message, settings["system"] or ""], options))
    with open_runtime(loading) as runtime:
        runtime.prompt_cache = PromptCache(prompt_cache_dir(), cache_limit)
        counts: list[int | None] = list(measure(attached, runtime.text_tokens,
                                                runtime.n_ctx))
        runtime.refuse_certainly_long(message if messages is None else messages)
        tokens = runtime.fitting(runtime.raw_tokens(message) if messages is None else
                                 runtime.chat_prompt(messages, options))
        head = tokens[runtime.record_start(messages, tokens):]  # kept in the drafting store
        finished = stream_answer(
            lambda progress: runtime.kept(runtime.stream(tokens, options, progress=progress),
                                          head), echo)
        if finished is not None:
            runtime.remember_prompt(tokens, finished.stats)
    return finished, runtime, counts


def _ask_remote(settings: Settings, options: GenerationOptions, attached: list[Attachment],
                text: str, raw: bool, echo: bool) -> Answer:
    """--endpoint: the server tokenizes, fits and answers; attachments go in the message."""
    message = compose(attached, text)
    with c.open_remote(settings, options) as backend:
        finished = stream_answer(
            lambda _progress: backend.complete(message, options) if raw else
            backend.answer(messages_for(message, settings["system"]), options), echo)
    return finished, backend, [None] * len(attached)  # the server's tokenizer is its own


def stream_answer(start: Callable[[ProgressCallback | None], Events],
                  echo: bool) -> Finished | None:
    """Stream chunks to stdout; None when Ctrl-C stopped the answer (or its prefill)."""
    progress = PrefillProgress(enabled=None if echo else False)
    started = False

    def write(chunk: Chunk) -> None:
        nonlocal started
        progress.clear()
        if echo and chunk.text:
            started = True
            output.write(chunk.text)

    try:
        finished = drain(start(progress), write)
        progress.clear()
    except KeyboardInterrupt:
        progress.clear()
        if echo and started:
            output.write("\n")
        print("specchat: interrupted", file=sys.stderr)
        return None
    if echo and finished is not None and not finished.text.endswith("\n"):
        output.write("\n")
    return finished


def answer_json(backend: Backend, finished: Finished) -> dict[str, object]:
    return {
        "text": finished.text,
        "tokens": list(finished.tokens),
        "finish_reason": finished.reason,
        "model": backend.info.target_name,
        "draft": backend.info.draft_name,
        "draft_found": backend.info.draft_found,
        "draft_not_loaded": backend.info.draft_not_loaded,
        "draft_drafts_text": backend.info.draft_text,  # another vocabulary than the model's
        "stats": finished.stats.to_dict(),
        "auto": backend.explain(finished.stats),
    }
