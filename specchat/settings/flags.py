"""Command-line flags generated from the options schema (schema.py).

`@with_options(names)` adds one flag per option to a typer command and hands the command a
resolved `Settings` (flag > env > profile > config file > default) in place of the flags, so
no command spells an option out again. Flags default to None, which means "not given": that
is what lets a config file or environment variable fill in what the command line left out.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Optional

import typer

from specchat.errors import UsageError
from specchat.settings.file import resolve
from specchat.settings.schema import BY_NAME, Option, OptionError

PROFILE_PARAM = "profile"
SETTINGS_PARAM = "settings"


def _annotation(opt: Option, default: Any) -> Any:
    decls = [opt.flag]
    if opt.kind is bool:
        decls = [f"{opt.flag}/--no-{opt.flag[2:]}"]
    if opt.short:
        decls.append(opt.short)
    kind: Any = {list: list[str], bool: bool}.get(opt.kind, opt.kind)
    if opt.parse is not None:
        kind = str  # parsed by the schema ("auto", "random", ...), not by click
    help_text = f"{opt.help} (env: {opt.env})"
    shown = "" if default in (None, []) else opt.show(default)
    complete = opt.complete
    if complete is None and opt.choices:
        complete = _complete_choices(opt.choices)
    info = typer.Option(*decls, help=help_text, show_default=shown or False,
                        metavar=opt.metavar, rich_help_panel=_PANELS.get(opt.group),
                        autocompletion=complete)
    return Annotated[Optional[kind], info]


def _complete_choices(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:  # typer passes arguments by these names
        return [c for c in choices if c.startswith(incomplete)]
    return complete


_PANELS = {"model": "Model", "generation": "Generation", "chat": "Chat",
           "remote": "Remote server", "server": "Server"}


def with_options(names: Iterable[str], *, defaults: Mapping[str, Any] | None = None,
                 flag_only: Iterable[str] = (), profile: bool = True
                 ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command whose last parameter is `settings: Settings`."""
    names = tuple(names)
    fixed = tuple(flag_only)
    base_defaults = dict(defaults or {})

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(func, eval_str=True).parameters.values()
               if p.name != SETTINGS_PARAM]
        extra = [inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=None,
            annotation=_annotation(BY_NAME[name], base_defaults.get(name,
                                                                    BY_NAME[name].default)))
            for name in names]
        if profile:
            extra.append(inspect.Parameter(
                PROFILE_PARAM, inspect.Parameter.KEYWORD_ONLY, default=None,
                annotation=Annotated[Optional[str], typer.Option(
                    "--profile", help="Use the settings of the config file's profile.NAME table. "
                    "(env: SPECCHAT_PROFILE)", rich_help_panel="Settings")]))

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            flags = {name: _from_flag(name, kwargs.pop(name, None)) for name in names}
            chosen = kwargs.pop(PROFILE_PARAM, None) if profile else None
            if _subcommand_follows([*args, *kwargs.values()]):
                # A group's callback before its subcommand (`config path`): the options are
                # for the group's own action, and a broken config file must not stop it.
                return func(*args, settings=None, **kwargs)
            settings = resolve(names, flags, profile=chosen, defaults=base_defaults,
                               flag_only=fixed)
            return func(*args, settings=settings, **kwargs)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                  if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD else p for p in own]
        command.__signature__ = inspect.Signature(params + extra)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params + extra}
        del command.__wrapped__  # typer must read the new signature, not the function's
        return command

    return decorate


def _subcommand_follows(values: Iterable[Any]) -> bool:
    """Whether a typer.Context among a group callback's arguments names a subcommand."""
    return any(isinstance(getattr(v, "invoked_subcommand", None), str) for v in values)


def _from_flag(name: str, value: Any) -> Any:
    """A flag's value through the schema's checks (None: the flag was not given)."""
    if value is None or (isinstance(value, list) and not value):
        return None
    opt = BY_NAME[name]
    try:
        return opt.accept(value)
    except OptionError as exc:
        raise UsageError(f"{opt.flag}: {exc}") from None

