"""The prompt-toolkit REPL: reading lines, multi-line input, completion, the main loop.

Keys: Enter sends; Esc then Enter inserts a newline; Ctrl-R searches earlier prompts
(prompt-toolkit's reverse search; Enter takes the found line); a message that starts with
\"\"\" goes on
until the closing \"\"\"; bracketed paste inserts pasted newlines without sending. Ctrl-C
clears a non-empty line and leaves on an empty one (exit 130); Ctrl-D on an empty line
leaves with 0. Ctrl-C during an answer is handled by ChatSession.ask (the answer stops).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import (
    CompleteEvent,
    Completer,
    Completion,
    PathCompleter,
)
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition, is_searching
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output

from specchat import fileio, fileread
from specchat.chat import ending
from specchat.chat.commands import COMMANDS, ExitChat, dispatch, is_command, lookup
from specchat.chat.session import ChatSession
from specchat.errors import EXIT_INTERRUPTED, SpecchatError
from specchat.fileio import FileIOError

PROMPT = ">>> "
CONTINUATION = "... "
FENCE = '"""'


def in_open_block(text: str) -> bool:
    """True while a \"\"\" block has been opened and not yet closed."""
    return text.lstrip().startswith(FENCE) and text.count(FENCE) % 2 == 1


def clean_message(text: str) -> str:
    """The message to send: a \"\"\"...\"\"\" block loses its fences; outer blank lines go."""
    stripped = text.strip()
    if stripped.startswith(FENCE) and stripped.endswith(FENCE) and len(stripped) >= 6:
        return stripped[3:-3].strip("\n")
    return stripped


class SlashCompleter(Completer):
    """Completion for slash commands and their arguments, read from the command table."""

    def __init__(self, chat: ChatSession) -> None:
        self.chat = chat
        self.paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event: CompleteEvent
                        ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not is_command(text) or "\n" in text:
            return
        words = text[1:].split(" ")
        if len(words) == 1:
            for cmd in COMMANDS:
                if cmd.name.startswith(words[0].lower()):
                    yield Completion(cmd.name, start_position=-len(words[0]),
                                     display_meta=cmd.help)
            return
        found = lookup(words[0])
        if found is None:
            return
        cmd = found
        if cmd.name in ("load", "save", "save!", "read", "save-settings"):
            sub = Document(text.split(" ", 1)[1])
            yield from self.paths.get_completions(sub, complete_event)
            return
        if cmd.complete is None:
            return
        current = words[-1]
        for candidate in cmd.complete(self.chat, words[1:]):
            if candidate.startswith(current):
                yield Completion(candidate, start_position=-len(current))


def key_bindings() -> KeyBindings:
    kb = KeyBindings()
    block_open = Condition(_current_text_in_block)
    # While Ctrl-R searches, Enter belongs to the search (it accepts the found line).
    typing = ~is_searching

    @kb.add("enter", filter=typing & ~block_open)
    def _send(event: KeyPressEvent) -> None:
        event.current_buffer.validate_and_handle()

    @kb.add("enter", filter=typing & block_open)
    @kb.add("escape", "enter", filter=typing)
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("c-c", filter=typing)  # while searching, Ctrl-C only ends the search
    def _interrupt(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()  # like a shell: Ctrl-C abandons the line, not the session
        else:
            event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

    return kb


def _current_text_in_block() -> bool:
    from prompt_toolkit.application.current import get_app

    return in_open_block(get_app().current_buffer.text)


class KeptInputLines(FileHistory):
    """The input lines (Up-arrow, Ctrl-R; on disk <state>/history) as prompt-toolkit's file
    history, read bounded and appended through fileio (a full disk cuts the record back
    instead of tearing it); a failure is kept in `problem` for the REPL to say once, never
    raised into prompt-toolkit (where it would be a traceback)."""

    LIMIT = 64 << 20  # years of typing; a link to /dev/zero is not read at all

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path
        self.problem: str | None = None

    def load_history_strings(self) -> Iterable[str]:
        """prompt-toolkit's format: each entry's lines after a "+", entries apart; newest
        first."""
        try:
            raw = fileread.read_limited(self.path, self.LIMIT)
        except (OSError, FileIOError) as exc:
            self.problem = str(exc)
            return []
        entries: list[str] = []
        lines: list[str] = []
        for line in raw.decode("utf-8", errors="replace").splitlines(keepends=True):
            if line.startswith("+"):
                lines.append(line[1:])
            elif lines:
                entries.append("".join(lines)[:-1])
                lines = []
        if lines:
            entries.append("".join(lines)[:-1])
        return reversed(entries)

    def store_string(self, string: str) -> None:
        # prompt-toolkit's own record format: a comment line, then each line after a "+".
        record = f"\n# {datetime.datetime.now()}\n" + "".join(
            f"+{line}\n" for line in string.split("\n"))
        try:
            fileio.append_bytes(self.path, record.encode("utf-8", errors="replace"))
        except FileIOError as exc:
            self.problem = str(exc)
        else:
            self.problem = None


def make_prompt(chat: ChatSession, *, input_lines: Path | None,
                input: Input | None = None, output: Output | None = None
                ) -> PromptSession[str]:
    lines: History = InMemoryHistory()
    if input_lines is not None:
        try:
            # prompt-toolkit appends with the umask's mode: the file must exist, private,
            # before it first writes the user's lines there.
            lines = KeptInputLines(fileio.ensure_file(input_lines))
        except FileIOError as exc:
            chat.renderer.note(f"input history not kept ({exc})")
    return PromptSession(
        message=PROMPT, multiline=True, prompt_continuation=CONTINUATION,
        history=lines, completer=SlashCompleter(chat), complete_while_typing=True,
        key_bindings=key_bindings(), enable_history_search=False,
        input=input, output=output,
    )


def run(chat: ChatSession, prompt: PromptSession[str]) -> int:
    """The loop; returns the exit code (0 for Ctrl-D and /bye, 130 for Ctrl-C)."""
    said: str | None = None  # the input history's last problem, said once
    while True:
        try:
            text = prompt.prompt()
        except KeyboardInterrupt:
            return ending.code() or EXIT_INTERRUPTED  # SIGTERM/SIGHUP at the prompt: leave
        except EOFError:
            return 0
        problem = getattr(prompt.history, "problem", None)
        if problem is not None and said is None:
            chat.renderer.note(f"input history not kept: {problem} (the chat goes on)")
        said = problem
        message = clean_message(text)
        if not message:
            continue
        try:
            handle(chat, message)
        except ExitChat as exc:
            return exc.code
        except ending.Ended as exc:
            return exc.code
        except KeyboardInterrupt:
            if ending.code() is not None:
                return ending.code() or EXIT_INTERRUPTED
            chat.renderer.note("interrupted")
        except SpecchatError as exc:
            chat.renderer.error(str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug or a C failure: one line, chat goes on
            chat.report(exc)


def handle(chat: ChatSession, message: str) -> None:
    if is_command(message):
        dispatch(chat, message)
    else:
        chat.ask(message[1:] if message.startswith("//") else message)
