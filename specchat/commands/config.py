"""`specchat config`: every option's effective value and where it came from; `config path`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from specchat.config import config_path, resolve
from specchat.options import BY_NAME, OPTIONS

app = typer.Typer(help="Show every option's effective value and its source (flag, env, "
                  "profile NAME, file, default); `config path` prints the config file's path.",
                  no_args_is_help=False)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="config")


@app.callback(invoke_without_command=True)
def config(
    ctx: typer.Context,
    profile: Annotated[Optional[str], typer.Option(
        "--profile", help="Show the values with the config file's profile.NAME table "
        "applied. (env: SPECCHAT_PROFILE)")] = None,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    names = [o.name for o in OPTIONS]
    settings = resolve(names, {}, profile=profile)
    width = max(len(n) for n in names)
    for name in names:
        value = BY_NAME[name].show(settings[name])
        print(f"{name:<{width}}  {value}  ({settings.sources[name]})")


@app.command("path", help="Print the config file's path (whether or not it exists yet).")
def path() -> None:
    print(config_path())
