"""The tables of a priced bench: speedups over `off` per category on one cost profile."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from specchat.bench.priced import OVERALL, PricedResult

SHOWN_MODES = ("ngram", "draft", "auto")


def render_priced(console: Console, result: PricedResult) -> None:
    """One table: a row per category, speedup over `off` per policy."""
    has_oracles = bool(result.best_fixed)
    table = Table(title=f"{result.profile}: simulated speedup over off, {result.recording}",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1, 0, 0), show_edge=False)
    columns = ["category", "n", *[m for m in SHOWN_MODES if m in result.modes]]
    if has_oracles:
        columns += ["draft k*", "best fixed", "oracle", "auto/bf"]
    for name in columns:
        table.add_column(name, justify="left" if name == "category" else "right",
                         no_wrap=True)
    for category in result.categories():
        by = result.table.get(category, {})
        off = by.get("off")
        row = [category, "-" if off is None else str(off.tokens)]
        row += [_x(result.speedup(category, m)) for m in SHOWN_MODES if m in result.modes]
        if has_oracles:
            row += _oracle_cells(result, category)
        table.add_row(*row)
    console.print(table)
    if has_oracles:
        console.print("n: answer tokens. draft best k, best fixed: the fastest fixed k "
                      "(mode:k; best fixed also weighs off and ngram), chosen per category "
                      "knowing the answers (overall: those choices summed). oracle: the "
                      "fastest sequence of steps. auto/bf: auto over best fixed.")


def _oracle_cells(result: PricedResult, category: str) -> list[str]:
    draft_name = result.best_draft.get(category)
    if category == OVERALL:
        draft = _x(result.speedup(category, "draft best k")) if draft_name else "-"
        best = result.speedup(category, "best fixed")
        best_cell = _x(best)
    else:
        draft = "-" if draft_name is None else (
            f"{_x(result.speedup(category, draft_name))} k{draft_name.split('=')[-1]}")
        name = result.best_fixed.get(category, "off")
        best = result.speedup(category, name)
        best_cell = f"{_x(best)} {_short(name)}"
    auto = result.speedup(category, "auto")
    ratio = "-" if auto is None or not best else f"{auto / best:.2f}"
    return [draft, best_cell, _x(result.speedup(category, "oracle")), ratio]


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _short(policy: str) -> str:
    """"ngram k=8" as "ngram:8" (the tables must fit 80 columns)."""
    return policy.replace(" k=", ":")
