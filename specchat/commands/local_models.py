"""`specchat models --local`: every model on this machine, by the tool that keeps it, with its
size, architecture and quantization, and which of them can draft for which; the `doctor`
rows about them. Headers are read once per file and remembered (models/headers.py).
"""

from __future__ import annotations

import json
from typing import Any

from specchat.llm.vocab import prints_compatible
from specchat.models.headers import Headers
from specchat.models.inventory import all_models
from specchat.models.pairing import PROJECTOR_ARCHS, fitting_drafts, summaries
from specchat.models.progress import human_size
from specchat.term import output
from specchat.term.safe import note

COLUMNS = ("SOURCE", "NAME", "SIZE", "ARCH", "QUANT", "DRAFTS")


def local_rows() -> list[dict[str, Any]]:
    """One row per model found (header read or remembered), and a note per refused entry."""
    models, refused = all_models()
    for line in refused:
        note(f"specchat: skipped: {line}")
    headers = Headers()
    unread = sum(1 for m in models if not headers.knows(m.path))
    if unread:
        note(f"specchat: reading the headers of {unread} models, once (remembered after)")
    unreadable: dict[str, str] = {}
    try:
        judged, _ = summaries(headers, models, None,
                              lambda m, why: unreadable.__setitem__(m.name, why))
    finally:
        headers.save()
    known = {m.name: s for m, s in judged}
    rows = []
    for model in models:
        summary = known.get(model.name)
        drafts: list[str] = []
        found = None
        if summary is not None and summary.arch not in PROJECTOR_ARCHS:
            # --drafts-for's rule (the same vocabulary, smaller); and the one a start would
            # pick by itself, which must also pay (models/pairing.py)
            drafts = [m.name for m, s in sorted(judged, key=lambda ms: ms[0].size)
                      if m.size < model.size and s.arch not in PROJECTOR_ARCHS
                      and prints_compatible(summary.vocab, s.vocab)]
            picked = fitting_drafts(summary, model.size, judged)
            found = picked[0].name if picked else None
        rows.append({"source": model.source, "name": model.name, "path": str(model.path),
                     "size": model.size, "arch": summary.arch if summary else None,
                     "quant": summary.quant if summary else None, "drafts": drafts,
                     "draft_found": found, "error": unreadable.get(model.name)})
    return rows


def print_local(as_json: bool) -> None:
    rows = local_rows()
    if as_json:
        output.line(json.dumps({"models": rows}, indent=2))
        return
    table = [list(COLUMNS)] + [[r["source"], r["name"], human_size(r["size"]),
                                r["arch"] or "?", r["quant"] or "?",
                                _drafts_cell(r)] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) - 1)]
    for line in table:
        head = "  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True))
        output.line(f"{head}  {line[-1]}")
    for row in rows:
        if row["error"]:
            note(f"specchat: {row['name']}: {row['error']}")
    note("DRAFTS: the smaller models here that share the model's vocabulary (`-d NAME`); "
         "* the one a start picks by itself when no draft is named (small enough to pay)")


def _drafts_cell(row: dict[str, Any]) -> str:
    return ", ".join(d + ("*" if d == row["draft_found"] else "") for d in row["drafts"]) or "-"


def doctor_rows() -> list[tuple[str, str]]:
    """How many models each tool keeps here, and which draft the configured target gets."""
    models, refused = all_models()
    counts: dict[str, int] = {}
    for model in models:
        counts[model.source] = counts.get(model.source, 0) + 1
    found = ", ".join(f"{n} {source}" for source, n in counts.items()) or "none"
    rows = [("local models", f"{found} (`specchat models --local` lists them and which can "
                             f"draft for which)")]
    if refused:
        rows.append(("local models refused", f"{len(refused)}; first: {refused[0]}"))
    rows.append(("draft model", _draft_line()))
    return rows


def _draft_line() -> str:
    """The draft the configured target starts with, and whether it was named or found."""
    from specchat.backend.loading import found_draft, wants_draft
    from specchat.models import DEFAULT_TARGET, resolve_model
    from specchat.settings.file import resolve
    from specchat.settings.load import LoadSettings

    settings = LoadSettings.from_settings(resolve(("model", "draft", "spec"), {}), quiet=True)
    target = settings.model or DEFAULT_TARGET
    if settings.no_draft or not settings.spec.uses_draft_model:
        return f"none for {target} (--draft none, or --spec {settings.spec.value})"
    named = wants_draft(settings)
    if named is not None:
        return f"{named} for {target} (named by -d or the preset){_text_note(target, named)}"
    found = found_draft(settings, resolve_model(target, pull=False, quiet=True))
    if found is None or found.model is None:
        return f"none found on this machine for {target} (-d MODEL names one)"
    return (f"{found.model.name} for {target}, found on this machine (--draft none turns it "
            "off)")


def _text_note(target: str, draft: str) -> str:
    """What the draft line adds when the named draft has another vocabulary than the target
    (read from both files' headers, no weights): it then drafts text. "" when they share
    one, or a file is not here to read."""
    from specchat.errors import SpecchatError
    from specchat.models import resolve_model

    headers = Headers()
    try:
        a, b = (headers.summary(resolve_model(name, pull=False, quiet=True))
                for name in (target, draft))
    except (SpecchatError, OSError):
        return ""
    finally:
        headers.save()
    if a is None or b is None or prints_compatible(a.vocab, b.vocab):
        return ""
    return ("; another vocabulary than the target's: it drafts text, re-tokenized for the "
            "target (exact, slower than a draft of the same vocabulary)")
