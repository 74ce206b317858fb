"""`specchat chat`: the REPL, or one answer when stdin is piped (`specchat history` is
commands/history.py)."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional, TextIO

import typer

from specchat import fileio
from specchat.backend.base import Backend
from specchat.backend.loading import open_runtime
from specchat.backend.local import positions_for
from specchat.chat import ending
from specchat.chat.attach import Attachment, measure, read_files
from specchat.chat.chatlog import ChatLog, PrivateChatLog, latest_file, load_conversation
from specchat.chat.conversation import Conversation
from specchat.commands import common as c
from specchat.engine.options import GenerationOptions
from specchat.errors import EXIT_INTERRUPTED, SpecchatError, UsageError
from specchat.fileio import FileIOError
from specchat.paths import input_lines_file, logs_dir
from specchat.settings.file import Settings
from specchat.settings.flags import with_options
from specchat.settings.load import LoadSettings

if TYPE_CHECKING:
    from prompt_toolkit.output import Output

    from specchat.chat.session import ChatSession, ErrorLog

# The terminal chat's own modules (prompt_toolkit, the markdown renderer: ~90 ms) are imported
# when a chat starts: every other command, `ask` in a pipeline above all, starts without them.


def register(app: typer.Typer) -> None:
    app.command("chat", help="Chat in the terminal (piped stdin: answer it once and exit).")(
        chat)


@with_options(c.CHAT_OPTIONS)
def chat(
    continue_: Annotated[bool, typer.Option("--continue", "-c", help="Resume the last "
                         "conversation.")] = False,
    load: Annotated[Optional[Path], typer.Option("--load", help="Resume a saved conversation "
                    "file (new turns go to a new file).", dir_okay=False)] = None,
    files: c.FilesFlag = None,
    *, settings: Settings,
) -> None:
    from specchat.chat.session import ErrorLog

    options = c.options_from(settings)
    verbose = bool(settings["verbose"])
    private = bool(settings["private"])
    errors = open_error_log() if verbose and not private else ErrorLog()
    if continue_ and load is not None:
        raise UsageError("--continue and --load both pick a conversation: give one")
    piped = not sys.stdin.isatty()
    if piped and "-" in (files or []):
        raise UsageError("-f - takes stdin, which then holds no question: use "
                         "`specchat ask -f - \"question\"` for that")
    attached = read_files(files or [])
    question = c.read_piped().decode("utf-8", errors="replace") if piped else ""
    if piped and not question.strip():
        return  # `specchat chat < /dev/null`: nothing asked, nothing to do
    conversation, chatlog = pick_conversation(continue_, load)  # a bad file fails before loading
    if private:  # nothing of what is asked or answered is written (settings/schema.py)
        chatlog = PrivateChatLog(meta=chatlog.meta)
    try:
        backend: Backend = c.open_remote(settings, options) if settings["endpoint"] else \
            open_runtime(replace(LoadSettings.from_settings(settings, quiet=piped),
                                 draft_on_demand=True,  # /mode draft loads one left out
                                 ctx_start=_first_turn(conversation, settings, question,
                                                       attached, options)))
        with backend as runtime, ending.installed():
            session = make_session(runtime, options, conversation, chatlog, errors,
                                   plain=settings["plain"], show_draft=settings["show_draft"])
            apply_system(session, settings["system"])
            attach(session, attached)
            code = one_shot(session, question) if piped else interactive(session, private)
    except (SpecchatError, KeyboardInterrupt, typer.Exit, BrokenPipeError):
        raise
    except Exception as exc:  # noqa: BLE001 - no tracebacks in the terminal; --verbose logs
        errors.record(exc)
        raise SpecchatError(f"{type(exc).__name__}: {exc} ({errors.hint()})") from None
    if code:
        # Leaving the chat with Ctrl-C is a choice, not an error, and an interrupted one-shot
        # answer has already said so: exit with the code and no further message.
        sys.exit(code)


def _first_turn(conversation: Conversation, settings: Settings, question: str,
                attached: list[Attachment], options: GenerationOptions) -> int:
    """Context positions the first answer can need (the context widens as the
    conversation grows, Runtime.make_room)."""
    texts = [str(m["content"]) for m in conversation.messages()]
    return positions_for([*texts, settings["system"] or "", question,
                          *(a.text for a in attached)], options)


def pick_conversation(continue_: bool, load: Path | None) -> tuple[Conversation, ChatLog]:
    """--continue appends to the last file; --load starts a new file from the given one."""
    if continue_:
        path = latest_file()
        if path is None:
            raise UsageError("no saved conversation to continue (specchat history lists them)")
        return load_conversation(path), ChatLog(path)
    if load is not None:
        conversation = load_conversation(load)
        chatlog = ChatLog(meta={"loaded_from": str(load)})
        chatlog.seed(conversation)
        return conversation, chatlog
    return Conversation(), ChatLog()


def make_session(runtime: Backend, options: GenerationOptions, conversation: Conversation,
                 chatlog: ChatLog, errors: ErrorLog, *, plain: bool, show_draft: bool
                 ) -> ChatSession:
    from specchat.chat.render import RenderConfig, Renderer
    from specchat.chat.session import ChatSession

    config = RenderConfig.detect(sys.stdout, sys.stderr, plain=plain, show_draft=show_draft)
    renderer = Renderer(config, sys.stdout, sys.stderr, draft_name=runtime.info.draft_name,
                        token_bytes=runtime.token_bytes)
    chatlog.meta.update({"model": runtime.info.target_name, "draft": runtime.info.draft_name})
    options = runtime.effective_options(options)
    return ChatSession(runtime=runtime, options=options, renderer=renderer,
                       conversation=conversation, chatlog=chatlog, errors=errors, plain=plain,
                       wants_show_draft=show_draft)


def attach(session: ChatSession, attached: list[Attachment]) -> None:
    """-f files go with the first message; a file too large for the context is refused."""
    if not attached:
        return
    session.pending = list(attached)
    runtime = session.runtime
    if runtime.n_ctx is None:
        names = ", ".join(a.name for a in attached)  # a server's tokens are its own to count
    else:
        counts = measure(attached, runtime.text_tokens, runtime.n_ctx)
        session.attached_tokens += sum(counts)
        names = ", ".join(f"{a.name} ({n} tokens)" for a, n in zip(attached, counts, strict=True))
    if session.renderer.config.summary:
        session.renderer.dim(f"attached {names}: they go with the first message")


def apply_system(session: ChatSession, system: str | None) -> None:
    """--system replaces the conversation's; recorded only when it changes something."""
    if system is None or system == session.conversation.system:
        return
    if session.chatlog.started:
        session.set_system(system)
    else:
        session.conversation.system = system
        session.chatlog.seed(session.conversation)  # written with the first turn


def one_shot(session: ChatSession, question: str) -> int:
    try:
        turn = session.ask(question.rstrip("\n"))
    except ending.Ended as exc:  # SIGTERM or SIGHUP: the partial turn is saved
        return exc.code
    return EXIT_INTERRUPTED if turn is None or turn.interrupted else 0


def interactive(session: ChatSession, private: bool = False) -> int:
    info = session.runtime.info
    model = info.target_name + (f" + draft {info.draft_name}" if info.draft_name else "")
    conv = session.conversation
    if conv.turns or conv.system:
        session.renderer.replay(conv.system, conv.turns)
    how = f"at {info.endpoint}" if info.endpoint else f"mode {session.options.spec}"
    session.renderer.dim(f"specchat · {model} · {how} · /help for commands · Ctrl-D leaves")
    session.check_saving()
    from specchat.chat import repl

    prompt = repl.make_prompt(session, output=_prompt_output(),
                              input_lines=None if private else input_lines_file())
    return repl.run(session, prompt)


def _prompt_output() -> Output:
    """Draw the prompt on the terminal, preferring stderr, so stdout holds only answers."""
    from prompt_toolkit.output import create_output

    stream: TextIO | None = sys.stderr if sys.stderr.isatty() else None
    if stream is None and sys.stdout.isatty():
        stream = sys.stdout
    return create_output(stdout=stream or sys.stderr)


def open_error_log() -> ErrorLog:
    from specchat.chat.session import ErrorLog

    logs = logs_dir()
    try:
        # Created private and exclusive first: logging would create it with the umask's mode.
        path = fileio.create_unique(logs, time.strftime("specchat-%Y%m%d-%H%M%S"), ".log")
        handler = logging.FileHandler(path, encoding="utf-8")
    except (OSError, FileIOError) as exc:
        print(f"specchat: cannot open a log file in {logs}: {exc}", file=sys.stderr)
        return ErrorLog()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # A logger of its own per log file: a second session in one process never writes twice.
    logger = logging.getLogger(f"specchat.chat.{path.stem}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    print(f"specchat: verbose log: {path}", file=sys.stderr)
    return ErrorLog(path, logger)
