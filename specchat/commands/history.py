"""`specchat history`: list, search, show, remove and export saved conversations.

What it prints came from models and users: it goes through term.output (shown, not obeyed, on
a terminal; exact into a pipe or a file; a full disk is one line and exit 1).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from specchat import storage
from specchat.chat import archive
from specchat.chat.store import summaries
from specchat.errors import UsageError
from specchat.term import output
from specchat.term.safe import note

app = typer.Typer(help="Saved conversations: list (newest first), search, show, rm, export. "
                  "ID: a conversation's ID, a unique prefix of it, or `last`.",
                  no_args_is_help=False)

Ident = Annotated[str, typer.Argument(help="Conversation ID, a unique prefix, or `last`.",
                                      show_default=False)]
FORMATS = ("markdown", "json")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="history")


@app.callback(invoke_without_command=True)
def history(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many to list.")] = 20,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    if limit < 1:
        raise UsageError(f"history --limit {limit}: give at least 1 (how many to list)")
    rows = list(summaries(limit))
    if not rows:
        note("no saved conversations yet")
        return
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.modified))
        first = row.first if len(row.first) <= 50 else row.first[:49] + "…"
        output.line(f"{row.path.stem:<17}  {when}  {row.turns:>3} turns  "
                    f"{row.model or '?':<18}  {first}")
        output.line(f"{'':<17}  {row.path}")


@app.command("search", help="Lines that contain TEXT (any case), newest conversation first.")
def search(text: Annotated[str, typer.Argument(help="What to look for.")]) -> None:
    if not text.strip():
        raise UsageError("history search needs some text to look for")
    found = 0
    for match in archive.search(text):
        found += 1
        output.line(f"{match.path.stem}  turn {match.turn}  {match.who}: "
                    f"{archive.excerpt(match.line, text)}")
    if not found:
        note(f"nothing matches {text!r}")


@app.command("show", help="Print a conversation (Markdown).")
def show(ident: Ident) -> None:
    output.write(archive.to_markdown(archive.find(ident)))


@app.command("rm", help="Delete a conversation (asks first unless --yes).")
def rm(ident: Ident,
       yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False) -> None:
    path = archive.find(ident)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"history rm would delete {path.stem}: confirm in a terminal or "
                             "pass --yes")
        conversation, _ = archive.load(path)
        first = conversation.turns[0].user.splitlines()[0][:60] if conversation.turns else ""
        question = f"delete {path.stem} ({len(conversation.turns)} turns: {first!r})?"
        if not typer.confirm(question, default=False, err=True):
            note("nothing deleted")
            return
    try:
        path.unlink()
    except OSError as exc:
        raise UsageError(f"cannot delete {path}: {storage.describe(exc)}") from None
    note(f"deleted {path.stem}")


@app.command("export", help="Write a conversation as Markdown or JSON (stdout, or -o FILE).")
def export(
    ident: Ident,
    fmt: Annotated[str, typer.Option("--format", help="markdown or json.")] = "markdown",
    to: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here "
                      "instead of stdout (never replaces a file without --force).",
                      dir_okay=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace -o FILE if it "
                     "exists.")] = False,
) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    path = archive.find(ident)
    text = archive.to_json(path) if fmt == "json" else archive.to_markdown(path)
    if to is None:
        output.write(text)
        return
    try:
        storage.atomic_write(to, text, overwrite=force)
    except FileExistsError:
        raise UsageError(f"{to} exists: pass --force to replace it") from None
    note(f"wrote {to}")
