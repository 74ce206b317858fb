"""The chat's live settings, read from the options schema: /set, /show and /save-settings.

Which options can change mid-chat, how their values are parsed and checked, and what they
are called all come from the options schema (`live=True`); this module only maps them onto the
session (generation options, the system prompt, how answers are rendered).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specchat.chat import switch
from specchat.chat.session import ChatSession
from specchat.errors import UsageError
from specchat.paths import config_file
from specchat.settings import schema
from specchat.settings.file import save_settings
from specchat.settings.schema import BY_NAME, GENERATION, OPTIONS, Option, OptionError
from specchat.settings.structure import format_values, structure_from_options

LIVE: tuple[Option, ...] = tuple(o for o in OPTIONS if o.live)
_SAMPLING = {f.name for f in dataclasses.fields(schema.SamplingOptions)}


def live_values(session: ChatSession) -> dict[str, Any]:
    """The session's current value of every live option, by option name."""
    opts = session.options
    config = session.renderer.config
    values: dict[str, Any] = {}
    values["format"], values["schema"] = format_values(opts.structure)
    for opt in LIVE:
        if opt.name in ("format", "schema"):
            continue
        if opt.group == GENERATION and opt.name in _SAMPLING:
            values[opt.name] = getattr(opts.sampling, opt.name)
        elif opt.group == GENERATION and opt.name != "system":
            value = getattr(opts, opt.name)
            values[opt.name] = list(value) if isinstance(value, tuple) else value
        elif opt.name == "system":
            values[opt.name] = session.conversation.system or None
        elif opt.name == "plain":
            values[opt.name] = session.plain
        elif opt.name == "show_draft":
            values[opt.name] = config.show_draft or session.wants_show_draft
    return values


def apply(session: ChatSession, opt: Option, value: Any) -> None:
    """Give the session a new value for a live option (already checked by the schema)."""
    if opt.name == "system":
        session.set_system(value or "")
    elif opt.name in ("plain", "show_draft"):
        if opt.name == "plain":
            session.plain = bool(value)
        else:
            session.wants_show_draft = bool(value)
        config = session.renderer.config
        session.renderer.config = dataclasses.replace(
            config, markdown=config.rich and not session.plain,
            show_draft=config.rich and session.wants_show_draft)
    elif opt.name == "spec":
        switch.use_mode(session, value)
    elif opt.name == "seed":
        session.set_options(seed=None if value == -1 else value)
    elif opt.name == "stop":
        session.set_options(stop=tuple(value))
    elif opt.name in ("format", "schema"):
        now = dict(zip(("format", "schema"), format_values(session.options.structure),
                       strict=True))
        now[opt.name] = value
        if opt.name == "format" and value == "text":
            now["schema"] = None  # /set format text: free text again
        session.set_options(structure=structure_from_options(now["format"] or "text",
                                                             now["schema"]))
    else:
        session.set_options(**{opt.name: value})


def set_command(session: ChatSession, arg: str) -> None:
    """/set: no argument lists the live options; `/set NAME` shows one; `/set NAME VALUE`."""
    parts = arg.split(None, 1)
    values = live_values(session)
    if not parts:
        session.renderer.lines([f"  {o.name:<15} {o.show(values[o.name])}" for o in LIVE])
        return
    opt = schema.lookup(parts[0])
    if not opt.live:
        how = "/model and /draft switch models; " if opt.name in ("model", "draft") else ""
        raise UsageError(f"{opt.name} cannot change mid-chat ({how}set {opt.flag} or "
                         "`specchat config` for the next chat)")
    if len(parts) == 1:
        session.renderer.info(f"{opt.name} = {opt.show(values[opt.name])}")
        return
    try:
        value = opt.from_text(parts[1])
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    apply(session, opt, value)
    session.renderer.dim(f"{opt.name} = {opt.show(value)}")


def complete_set(session: ChatSession, words: Sequence[str]) -> list[str]:
    if len(words) <= 1:
        return [o.name for o in LIVE]
    opt = BY_NAME.get(words[0].replace("-", "_"))
    if opt is None:
        return []
    if opt.choices:
        return list(opt.choices)
    return ["true", "false"] if opt.kind is bool else []


def show_line(session: ChatSession) -> str:
    """The options line of /show."""
    values = live_values(session)
    return "  ".join(f"{o.name}={o.show(values[o.name])}" for o in LIVE if o.name != "system")


def to_save(session: ChatSession) -> dict[str, Any]:
    """What /save-settings writes: every live option, plus the models in use when they were
    chosen here (a remote server's are its own).

    A value equal to the built-in default is written as None, which removes the key from
    the file, so the file holds only what differs and a later change of default applies.
    """
    values = live_values(session)
    values.update(session.runtime.chosen_models())
    return {name: None if value == BY_NAME[name].default else value
            for name, value in values.items()}


def save_command(session: ChatSession, arg: str) -> None:
    """/save-settings [PATH]: into the config file's base table, comments and profiles kept."""
    target = Path(arg.strip()).expanduser() if arg.strip() else config_file()
    values = to_save(session)
    path = save_settings(values, target)
    kept = sorted(k for k, v in values.items() if v is not None)
    session.renderer.dim(f"saved {len(kept)} setting{'s' if len(kept) != 1 else ''} to "
                         f"{path}" + (f" ({', '.join(kept)})" if kept else "")
                         + "; the others are at their defaults")
