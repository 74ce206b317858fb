"""`specchat history`: list, search, show, remove and export saved conversations.

What it prints came from models and users: it goes through term.output (shown, not obeyed, on
a terminal; exact into a pipe or a file; a full disk is one line and exit 1).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from specchat import fileio
from specchat.backend.draftstore import clear as clear_store
from specchat.backend.draftstore import forget_everywhere, tag_of, usage_by_vocabulary
from specchat.chat import archive
from specchat.chat.chatlog import conversation_summaries, read_records
from specchat.errors import UsageError
from specchat.paths import draft_store_dir, serve_store_dir
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
    rows = list(conversation_summaries(limit))
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
    tags = {tag_of(str(r["assistant"])) for r in read_records(path)
            if r.get("type") == "turn" and r.get("assistant")}
    try:
        path.unlink()
    except OSError as exc:
        raise UsageError(f"cannot delete {path}: {fileio.describe(exc)}") from None
    note(f"deleted {path.stem}")
    try:
        forgotten = forget_everywhere(tags)
    except (OSError, fileio.FileIOError) as exc:
        note(f"specchat: its answers are still in the drafting store ({exc}): "
             "`specchat history store --clear` removes them all")
        raise typer.Exit(1) from None
    if forgotten:
        note(f"removed {forgotten} of its answers from the drafting store")


@app.command("store", help="Where the drafting store of earlier prompts and answers is, "
             "and how big, with `serve`'s stores of its clients (--clear: delete them all).")
def store(clear_: Annotated[bool, typer.Option("--clear", help="Delete every answer in "
                            "them (asks first unless --yes).")] = False,
          yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False
          ) -> None:
    root = draft_store_dir()
    usage = usage_by_vocabulary(root)
    output.line(f"drafting store: {root}")
    for vocab, (files, size, records) in usage.items():
        output.line(f"  vocabulary {vocab}: {records} answers, {size / 1e6:.1f} MB in "
                    f"{files} files")
    if not usage:
        output.line("  (empty)")
    # A cleared client's folder keeps its store's lock file: only folders with answers count.
    clients = [d for d in _served_stores() if usage_by_vocabulary(d)]
    if clients:
        kept = [u for d in clients for u in usage_by_vocabulary(d).values()]
        output.line(f"serve's stores of its clients: {serve_store_dir()}: {len(clients)} "
                    f"clients, {sum(u[2] for u in kept)} answers, "
                    f"{sum(u[1] for u in kept) / 1e6:.1f} MB")
    if not clear_ or not (usage or clients):
        return
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("history store --clear would delete every kept answer: confirm "
                             "in a terminal or pass --yes")
        if not typer.confirm("delete every answer in the drafting stores?", default=False,
                             err=True):
            note("nothing deleted")
            return
    gone = clear_store(root) + sum(clear_store(d) for d in clients)
    for folder in clients:
        with contextlib.suppress(OSError):
            folder.rmdir()
    note(f"deleted {gone} answers from the drafting store" +
         (" and serve's stores" if clients else ""))


def _served_stores() -> list[Path]:
    """Each client's folder of `serve`'s drafting stores (backend/clients.py)."""
    base = serve_store_dir()
    try:
        return sorted(d for d in base.iterdir() if d.is_dir() and not d.is_symlink())
    except OSError:
        return []


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
        fileio.atomic_write(to, text, overwrite=force)
    except FileExistsError:
        raise UsageError(f"{to} exists: pass --force to replace it") from None
    note(f"wrote {to}")
