"""Slash commands, from one table: dispatch, /help and tab completion are all read from it."""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.chat import clipboard
from specchat.chat.session import ChatSession
from specchat.engine.options import SPEC_MODES, GenerationOptions, SamplingOptions
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


# --- /set: every sampling and generation option, typed from the dataclasses -------------
ALIASES = {"temp": "temperature", "mode": "spec", "n": "max_tokens"}
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def option_types() -> dict[str, Any]:
    hints = typing.get_type_hints(SamplingOptions) | typing.get_type_hints(GenerationOptions)
    hints.pop("sampling", None)
    return hints


def flat_options(options: GenerationOptions) -> dict[str, Any]:
    out = dataclasses.asdict(options.sampling)
    out.update({f.name: getattr(options, f.name) for f in dataclasses.fields(options)
                if f.name != "sampling"})
    return out


def parse_value(name: str, kind: Any, raw: str) -> Any:
    """Turn what the user typed into the option's type; errors name the option."""
    args = typing.get_args(kind)
    if type(None) in args and raw.lower() in ("none", "off", "random", "-"):
        return None
    base = next((a for a in args if a is not type(None)), kind) if args else kind
    if typing.get_origin(kind) is tuple:  # stop strings: "\n\n" or ["a", "b"] or none
        if raw.lower() in ("none", "off", "-"):
            return ()
        if raw.startswith("["):
            try:
                return tuple(str(s) for s in json.loads(raw))
            except (ValueError, TypeError):
                raise UsageError(f"{name}: give a JSON list like [\"\\n\\n\", \"END\"]") from None
        # Only \n, \t and \\ are escapes: anything else (non-ASCII included) stays as typed.
        return (re.sub(r"\\([nt\\])", lambda m: _ESCAPES[m.group(1)], raw),)
    try:
        return base(raw) if base in (int, float, str) else raw
    except ValueError:
        raise UsageError(f"{name} needs {'an integer' if base is int else 'a number'}, "
                         f"not {raw!r}") from None


def _set(session: ChatSession, arg: str) -> None:
    parts = arg.split(None, 1)
    current = flat_options(session.options)
    if not parts:
        session.renderer.lines(_option_lines(current))
        return
    name = ALIASES.get(parts[0].lower(), parts[0].lower().replace("-", "_"))
    types = option_types()
    if name not in types:
        near = difflib.get_close_matches(name, list(types), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise UsageError(f"no option {parts[0]!r}{hint}; /set lists them")
    if len(parts) == 1:
        session.renderer.info(f"{name} = {current[name]!r}")
        return
    value = parse_value(name, types[name], parts[1].strip())
    session.set_options(**{name: value})
    session.renderer.dim(f"{name} = {value!r}")


def _option_lines(values: dict[str, Any]) -> list[str]:
    return [f"  {k:<15} {v!r}" for k, v in values.items()]


def _complete_set(session: ChatSession, words: Sequence[str]) -> list[str]:
    if len(words) <= 1:
        return sorted(option_types())
    name = ALIASES.get(words[0], words[0].replace("-", "_"))
    return list(SPEC_MODES) if name == "spec" else []


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
        f"draft     {info.draft_name or 'none'}  {info.draft_path or ''}".rstrip(),
        f"template  {template}{' (fallback)' if info.template_is_fallback else ''}",
        f"context   {_context_line(session)}",
        f"system    {conv.system or '(none)'}",
        f"saved to  {session.store.path} ({len(conv.turns)} turns)",
        "options   " + "  ".join(f"{k}={v!r}" for k, v in flat_options(session.options).items()),
    ]
    session.renderer.lines(lines + [f"note      {n}" for n in info.notes])


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


def _save(session: ChatSession, arg: str) -> None:
    name = arg.strip() or time.strftime("specchat-%Y%m%d-%H%M%S.jsonl")
    path = Path(name).expanduser()
    session.save(path)
    session.renderer.dim(f"saved {len(session.conversation.turns)} turns to {path}")


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
    session.renderer.lines(session.tally.lines() + session.runtime.stats_lines(session.options))


def _mode(session: ChatSession, arg: str) -> None:
    mode = arg.strip().lower()
    if not mode:
        session.renderer.info(f"mode: {session.options.spec}")
        return
    if mode not in SPEC_MODES:
        raise UsageError(f"/mode takes one of {', '.join(SPEC_MODES)}")
    session.set_options(spec=mode)
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
            "argument: list them)", _set, _complete_set),
    Command("show", "", "model files, chat template, context use, options", _show),
    Command("system", "<text>", "set the system prompt (- removes it; none: show it)",
            _system),
    Command("clear", "", "start a new conversation (keeps the system prompt)", _clear),
    Command("regen", "", "answer the last question again", _regen),
    Command("undo", "", "remove the last question and its answer", _undo),
    Command("save", "[file]", "save a copy (.jsonl, or .md for a transcript)", _save),
    Command("load", "<file>", "continue a saved conversation", _load),
    Command("copy", "[N]", "copy the last answer, or its code block N, to the clipboard",
            _copy),
    Command("stats", "", "session statistics, acceptance by draft position", _stats),
    Command("mode", "draft|ngram|off|auto", "how to speculate", _mode, _modes),
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
