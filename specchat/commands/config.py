"""`specchat config`: every option's effective value and where it came from; `config path`."""

from __future__ import annotations

import typer

from specchat.paths import config_file
from specchat.settings.file import Settings
from specchat.settings.flags import with_options
from specchat.settings.schema import BY_NAME, OPTIONS
from specchat.term import output

app = typer.Typer(help="Show every option's effective value and its source (flag, env, "
                  "profile NAME, file, default); `config path` prints the config file's path.",
                  no_args_is_help=False)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="config")


NAMES = tuple(o.name for o in OPTIONS)


@app.callback(invoke_without_command=True)
@with_options(NAMES)
def config(context: typer.Context, *, settings: Settings | None) -> None:
    """Any option flag may be given too: the table then shows what that command line
    would resolve to."""
    if context.invoked_subcommand is not None or settings is None:
        return
    shown = {name: BY_NAME[name].show(settings[name]) for name in NAMES}
    width = max(len(n) for n in NAMES)
    value_width = min(max(len(v) for v in shown.values()), 30)
    for name in NAMES:
        output.line(f"{name:<{width}}  {shown[name]:<{value_width}}  {settings.sources[name]}")


@app.command("path", help="Print the config file's path (whether or not it exists yet).")
def path() -> None:
    output.line(str(config_file()))
