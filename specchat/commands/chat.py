"""`specchat chat` (the REPL, or one answer when stdin is piped) and `specchat history`."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Optional, TextIO

import typer
from prompt_toolkit.output import Output, create_output

from specchat.chat import repl
from specchat.chat.conversation import Conversation
from specchat.chat.render import Renderer, RenderConfig
from specchat.chat.session import ChatSession, ErrorLog
from specchat.chat.store import (Store, history_file, latest_file, load_conversation,
                                 state_dir, summaries)
from specchat.commands import common as c
from specchat.config import Settings
from specchat.engine.options import GenerationOptions
from specchat.errors import EXIT_INTERRUPTED, SpecchatError, UsageError
from specchat.optflags import with_options
from specchat.runtime import Backend, open_runtime

def register(app: typer.Typer) -> None:
    app.command("chat", help="Chat in the terminal (piped stdin: answer it once and exit).")(
        chat)
    app.command("history", help="List saved conversations, newest first.")(history)


@with_options(c.CHAT_OPTIONS)
def chat(
    continue_: Annotated[bool, typer.Option("--continue", "-c", help="Resume the last "
                         "conversation.")] = False,
    load: Annotated[Optional[Path], typer.Option("--load", help="Resume a saved conversation "
                    "file (new turns go to a new file).", dir_okay=False)] = None,
    *, settings: Settings,
) -> None:
    options = c.options_from(settings)
    verbose = bool(settings["verbose"])
    errors = open_error_log() if verbose else ErrorLog()
    if continue_ and load is not None:
        raise UsageError("--continue and --load both pick a conversation: give one")
    piped = not sys.stdin.isatty()
    question = sys.stdin.buffer.read().decode("utf-8", errors="replace") if piped else ""
    if piped and not question.strip():
        return  # `specchat chat < /dev/null`: nothing asked, nothing to do
    conversation, store = pick_conversation(continue_, load)  # a bad file fails before loading
    try:
        backend: Backend = c.open_remote(settings, options) if settings["endpoint"] else \
            open_runtime(c.load_settings(settings, quiet=piped))
        with backend as runtime:
            session = make_session(runtime, options, conversation, store, errors,
                                   plain=settings["plain"], show_draft=settings["show_draft"])
            apply_system(session, settings["system"])
            code = one_shot(session, question) if piped else interactive(session)
    except (SpecchatError, KeyboardInterrupt, typer.Exit):
        raise
    except Exception as exc:  # keep tracebacks out of the terminal; --verbose logs them
        errors.record(exc)
        raise SpecchatError(f"{type(exc).__name__}: {exc} ({errors.hint()})") from None
    if code:
        # SystemExit, not typer.Exit: cli.main reports a returned 130 as "error: interrupted",
        # and leaving the chat with Ctrl-C is a choice, not an error (the interrupted
        # one-shot answer has already said so).
        sys.exit(code)


def pick_conversation(continue_: bool, load: Path | None) -> tuple[Conversation, Store]:
    """--continue appends to the last file; --load starts a new file from the given one."""
    if continue_:
        path = latest_file()
        if path is None:
            raise UsageError("no saved conversation to continue (specchat history lists them)")
        return load_conversation(path), Store(path)
    if load is not None:
        conversation = load_conversation(load)
        store = Store(meta={"loaded_from": str(load)})
        store.seed(conversation)
        return conversation, store
    return Conversation(), Store()


def make_session(runtime: Backend, options: GenerationOptions, conversation: Conversation,
                 store: Store, errors: ErrorLog, *, plain: bool, show_draft: bool
                 ) -> ChatSession:
    config = RenderConfig.detect(sys.stdout, sys.stderr, plain=plain, show_draft=show_draft)
    renderer = Renderer(config, sys.stdout, sys.stderr, draft_name=runtime.info.draft_name,
                        token_bytes=runtime.token_bytes)
    store.meta.update({"model": runtime.info.target_name, "draft": runtime.info.draft_name})
    options = runtime.effective_options(options)
    return ChatSession(runtime=runtime, options=options, renderer=renderer,
                       conversation=conversation, store=store, errors=errors)


def apply_system(session: ChatSession, system: str | None) -> None:
    """--system replaces the conversation's; recorded only when it changes something."""
    if system is None or system == session.conversation.system:
        return
    if session.store.path.exists():
        session.set_system(system)
    else:
        session.conversation.system = system
        session.store.seed(session.conversation)  # written with the first turn


def one_shot(session: ChatSession, question: str) -> int:
    turn = session.ask(question.rstrip("\n"))
    return EXIT_INTERRUPTED if turn is None or turn.interrupted else 0


def interactive(session: ChatSession) -> int:
    info = session.runtime.info
    model = info.target_name + (f" + draft {info.draft_name}" if info.draft_name else "")
    conv = session.conversation
    if conv.turns or conv.system:
        session.renderer.replay(conv.system, conv.turns)
    how = f"at {info.endpoint}" if info.endpoint else f"mode {session.options.spec}"
    session.renderer.dim(f"specchat · {model} · {how} · /help for commands · Ctrl-D leaves")
    prompt = repl.make_prompt(session, history_path=history_file(), output=_prompt_output())
    return repl.run(session, prompt)


def _prompt_output() -> Output:
    """Draw the prompt on the terminal, preferring stderr, so stdout holds only answers."""
    stream: TextIO | None = sys.stderr if sys.stderr.isatty() else None
    if stream is None and sys.stdout.isatty():
        stream = sys.stdout
    return create_output(stdout=stream or sys.stderr)


def open_error_log() -> ErrorLog:
    path = state_dir() / "logs" / time.strftime("specchat-%Y%m%d-%H%M%S.log")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError as exc:
        print(f"specchat: cannot open a log file at {path}: {exc.strerror}", file=sys.stderr)
        return ErrorLog()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # A logger of its own per log file: a second session in one process never writes twice.
    logger = logging.getLogger(f"specchat.chat.{path.stem}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    print(f"specchat: verbose log: {path}", file=sys.stderr)
    return ErrorLog(path, logger)


def history(
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many to list.")] = 20,
) -> None:
    rows = list(summaries(limit))
    if not rows:
        print("no saved conversations yet", file=sys.stderr)
        return
    for i, row in enumerate(rows, 1):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.modified))
        first = row.first if len(row.first) <= 50 else row.first[:49] + "…"
        print(f"{i:>3}  {when}  {row.turns:>3} turns  {row.model or '?':<18}  {first}")
        print(f"     {row.path}")
