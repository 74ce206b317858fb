"""Slash commands, from one table: dispatch, /help and tab completion are all read from it."""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specchat.backend.base import RuntimeInfo
from specchat.chat import clipboard, live, switch
from specchat.chat.session import ChatSession
from specchat.engine.options import SPEC_MODES
from specchat.errors import UsageError

Handler = Callable[[ChatSession, str], None]
Completer = Callable[[ChatSession, Sequence[str]], list[str]]


class ExitChat(Exception):
    """Leave the REPL with this exit code."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Command:
    name: str
    args: str
    help: str
    handler: Handler
    complete: Completer | None = None  # candidates for the argument being typed
    aliases: tuple[str, ...] = ()

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.args}".rstrip()


# --- the handlers ---------------------------------------------------------------------
def _help(session: ChatSession, arg: str) -> None:
    name = arg.strip().lstrip("/")
    if name:
        cmd = lookup(name)
        if cmd is None:
            raise UsageError(unknown_message(name))
        session.renderer.info(f"{cmd.usage}  {cmd.help}")
        return
    width = max(len(c.usage) for c in COMMANDS)
    session.renderer.lines([f"  {c.usage:<{width}}  {c.help}" for c in COMMANDS] + [
        "  Enter sends; Esc then Enter (or a \"\"\" block) adds a line; pasted text keeps its "
        "lines.", "  Ctrl-C stops an answer or clears the line; Ctrl-C on an empty line or "
        "Ctrl-D leaves."])


def _show(session: ChatSession, arg: str) -> None:
    info = session.runtime.info
    conv = session.conversation
    template = info.template_note or "the model's own"
    lines = [
        f"model     {info.target_name}  {info.target_path}",
        _draft_line(info),
        f"template  {template}{' (fallback)' if info.template_is_fallback else ''}",
        f"context   {_context_line(session)}",
        f"system    {conv.system or '(none)'}",
        f"saved to  {session.chatlog.path or '(a new file, with the first turn)'} "
        f"({len(conv.turns)} turns)",
        "options   " + live.show_line(session),
    ]
    session.renderer.lines(lines + [f"note      {n}" for n in info.notes])


def _draft_line(info: RuntimeInfo) -> str:
    if info.draft_name is None and info.draft_not_loaded:
        return f"draft     none ({info.draft_not_loaded})"
    return f"draft     {info.draft_name or 'none'}  {info.draft_path or ''}".rstrip()


def _context_line(session: ChatSession) -> str:
    use = session.context_use()
    if use is None:
        return "the server's (it says when the conversation no longer fits)"
    used, n_ctx = use
    left_out = session.conversation.start
    return (f"{used} / {n_ctx} tokens ({used / max(n_ctx, 1):.0%}); cache holds "
            f"{session.runtime.cached_tokens()}"
            + (f"; {left_out} oldest turns left out" if left_out else ""))


def _system(session: ChatSession, arg: str) -> None:
    text = arg.strip()
    if not text:
        session.renderer.info(f"system prompt: {session.conversation.system or '(none)'}")
        return
    session.set_system("" if text == "-" else text)
    session.renderer.dim("system prompt removed" if text == "-" else "system prompt set")


def _clear(session: ChatSession, arg: str) -> None:
    session.clear()
    session.renderer.dim("cleared: a new conversation starts (the old one stays saved)")


def _regen(session: ChatSession, arg: str) -> None:
    session.regen()


def _undo(session: ChatSession, arg: str) -> None:
    turn = session.undo()
    preview = " ".join(turn.user.split())[:60]
    session.renderer.dim(f"removed the last turn ({preview!r})")


def _save(session: ChatSession, arg: str, *, overwrite: bool = False) -> None:
    name = arg.strip() or time.strftime("specchat-%Y%m%d-%H%M%S.jsonl")
    path = Path(name).expanduser()
    session.save(path, overwrite=overwrite)
    session.renderer.dim(f"saved {len(session.conversation.turns)} turns to {path}")


def _save_over(session: ChatSession, arg: str) -> None:
    if not arg.strip():
        raise UsageError("/save! needs the file to replace: /save! FILE")
    _save(session, arg, overwrite=True)


def _load(session: ChatSession, arg: str) -> None:
    if not arg.strip():
        raise UsageError("/load needs a file: /load PATH (specchat history lists them)")
    session.load(Path(arg.strip()).expanduser())
    turns = session.conversation.turns
    session.renderer.dim(f"loaded {len(turns)} turns from {arg.strip()}")


def _copy(session: ChatSession, arg: str) -> None:
    text = session.conversation.last_answer()
    if text is None:
        raise UsageError("nothing to copy yet")
    what = "the last answer"
    if arg.strip():
        blocks = clipboard.code_blocks(text)
        try:
            n = int(arg.strip())
        except ValueError:
            raise UsageError("/copy takes a code block number, e.g. /copy 1") from None
        if not 1 <= n <= len(blocks):
            raise UsageError(f"the last answer has {len(blocks)} code block"
                             f"{'' if len(blocks) == 1 else 's'}")
        text, what = blocks[n - 1], f"code block {n}"
    try:
        how = clipboard.copy(text, session.renderer.err)
    except OSError as exc:
        raise UsageError(str(exc)) from None
    session.renderer.dim(f"copied {what} ({len(text)} characters) via {how}")


def _stats(session: ChatSession, arg: str) -> None:
    session.renderer.lines(session.tally.lines() + switch.attachment_lines(session)
                           + session.runtime.stats_lines(session.options))


def _mode(session: ChatSession, arg: str) -> None:
    mode = arg.strip().lower()
    if not mode:
        session.renderer.info(f"mode: {session.options.spec}")
        return
    if mode not in SPEC_MODES:
        raise UsageError(f"/mode takes one of {', '.join(SPEC_MODES)}")
    if not switch.use_mode(session, mode):  # a loaded draft says the mode with the models
        session.renderer.dim(f"mode: {mode}")


def _bye(session: ChatSession, arg: str) -> None:
    raise ExitChat(0)


def _modes(session: ChatSession, words: Sequence[str]) -> list[str]:
    return list(SPEC_MODES) if len(words) <= 1 else []


def _command_names(session: ChatSession, words: Sequence[str]) -> list[str]:
    return [c.name for c in COMMANDS] if len(words) <= 1 else []


COMMANDS: tuple[Command, ...] = (
    Command("help", "[command]", "this list, or one command's usage", _help, _command_names,
            aliases=("?",)),
    Command("set", "<option> <value>", "change a sampling or speculation option (no "
            "argument: list them)", live.set_command, live.complete_set),
    Command("show", "", "model files, chat template, context use, options", _show),
    Command("system", "<text>", "set the system prompt (- removes it; none: show it)",
            _system),
    Command("clear", "", "start a new conversation (keeps the system prompt)", _clear),
    Command("regen", "", "answer the last question again", _regen),
    Command("undo", "", "remove the last question and its answer", _undo),
    Command("save", "[file]", "save a copy (.jsonl, or .md for a transcript); never "
            "replaces a file", _save),
    Command("save!", "<file>", "save a copy, replacing an existing file", _save_over),
    Command("save-settings", "[file]", "write the current settings to the config file "
            "(comments and profiles kept)", live.save_command),
    Command("load", "<file>", "continue a saved conversation", _load),
    Command("read", "<file>", "attach a file's text to your next message", switch.read),
    Command("copy", "[N]", "copy the last answer, or its code block N, to the clipboard",
            _copy),
    Command("stats", "", "session statistics, acceptance by draft position", _stats),
    Command("mode", "draft|ngram|off|auto", "how to speculate", _mode, _modes),
    Command("model", "<name|path>", "switch the target model; the conversation stays",
            switch.model, switch.complete_models),
    Command("draft", "<name|path|none>", "switch the draft model (none: no draft model)",
            switch.draft, switch.complete_drafts),
    Command("bye", "", "leave", _bye, aliases=("exit", "quit")),
)


def lookup(name: str) -> Command | None:
    name = name.lower()
    return next((c for c in COMMANDS if name == c.name or name in c.aliases), None)


def unknown_message(name: str) -> str:
    names = [c.name for c in COMMANDS] + [a for c in COMMANDS for a in c.aliases]
    near = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.5)
    hint = f"did you mean /{near[0]}? " if near else ""
    return f"unknown command /{name}: {hint}(/help lists them)"


def is_command(line: str) -> bool:
    """A line starting with one slash; `//text` sends `/text` as an ordinary message."""
    return line.startswith("/") and not line.startswith("//")


def dispatch(session: ChatSession, line: str) -> None:
    """Run one slash command; UsageError is for the caller to show as one line."""
    name, _, arg = line[1:].partition(" ")
    cmd = lookup(name.strip())
    if cmd is None:
        raise UsageError(unknown_message(name.strip()))
    cmd.handler(session, arg)
