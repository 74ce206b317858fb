"""Which local model can draft for which, and the draft found for a target given none.

A pair qualifies by the rule `--spec draft` enforces (vocab.compatibility_problems, here on the
vocabulary prints kept by headers.py, so no vocabulary is read twice) and by cost: the draft
must be much smaller (at most MAX_DRAFT_SHARE of the target's bytes) and, with its step priced
at its share of the target's bytes (decoding reads every weight once a token), must be able to
beat plain steps on the batch costs `auto` starts from before it measures anything
(AutoState.draft_model_can_pay on engine.auto.CPU_RATIOS). Among those the smallest is
picked: at the same acceptance the cheapest draft pays best, and acceptance is only known
once the pair has run (auto then measures it and stops drafting where it does not pay).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specchat.engine.auto import CPU_RATIOS, AutoState
from specchat.engine.cost import CostTable
from specchat.errors import SpecchatError
from specchat.llm.gguf import GgufSummary, gguf_parts
from specchat.llm.vocab import prints_compatible
from specchat.models.headers import Headers
from specchat.models.inventory import all_models
from specchat.models.localfiles import LocalModel

MAX_DRAFT_SHARE = 0.25  # a draft above a quarter of the target's bytes is not "much smaller"
# Seconds of header reading a start may spend on candidates not read before (~0.3 s each; the
# first is always read): a start with new models waits at most about this much more, and the
# rest are read by later starts (or all at once by `specchat models --local`).
SEARCH_BUDGET = 1.0
PROJECTOR_ARCHS = ("clip",)  # vision projectors are GGUF files, not language models
_MAX_K = 16


def can_pay(target_size: int, draft_size: int) -> bool:
    """Whether a draft of `draft_size` bytes can pay for a target of `target_size` bytes."""
    if draft_size <= 0 or target_size <= 0 or draft_size > target_size * MAX_DRAFT_SHARE:
        return False
    state = AutoState(target_costs=CostTable.from_ratios(1.0, CPU_RATIOS),
                      draft_costs=CostTable.from_ratios(draft_size / target_size, (1.0,)))
    return state.draft_model_can_pay(_MAX_K)


def fitting_drafts(target: GgufSummary, target_size: int,
                   candidates: list[tuple[LocalModel, GgufSummary]]) -> list[LocalModel]:
    """The candidates that can draft for the target, best first."""
    fit = [model for model, summary in candidates
           if summary.arch not in PROJECTOR_ARCHS and can_pay(target_size, model.size)
           and prints_compatible(target.vocab, summary.vocab)]
    return sorted(fit, key=lambda m: (m.size, m.name))


@dataclass(frozen=True)
class FoundDraft:
    """The draft picked for a target, and what the search could not look at in time."""

    model: LocalModel | None
    unchecked: int  # candidates whose headers were not read yet (beyond the budget)
    target_size: int


def find_draft(target_path: Path, *, budget: float = SEARCH_BUDGET,
               headers: Headers | None = None) -> FoundDraft:
    """The best local draft for the model file at `target_path` (none: FoundDraft.model None).

    Cheap where it can be: only files small enough to pay are looked at, and their headers
    come from the memo; at most about `budget` seconds go to reading candidates' headers not
    read before.
    """
    real = target_path.resolve()
    # Parts by the name given: a Hugging Face snapshot's links point at blobs named by hash.
    target_size = sum(p.stat().st_size for p in gguf_parts(target_path))
    models, _ = all_models()
    small = [m for m in models if m.path.resolve() != real and can_pay(target_size, m.size)]
    if not small:  # the usual case costs a few stats: no header is read at all
        return FoundDraft(None, 0, target_size)
    headers = headers or Headers()
    try:
        target = headers.summary(real)
        assert target is not None
        judged, unchecked = summaries(headers, small, budget)
    finally:
        headers.save()
    found = fitting_drafts(target, target_size, judged)
    return FoundDraft(found[0] if found else None, unchecked, target_size)


def summaries(headers: Headers, models: list[LocalModel], budget: float | None,
              on_error: Callable[[LocalModel, str], None] | None = None
              ) -> tuple[list[tuple[LocalModel, GgufSummary]], int]:
    """(model, summary) for every model whose header is known or could be read within
    `budget` seconds (None: no limit), and how many were left unread."""
    judged: list[tuple[LocalModel, GgufSummary]] = []
    unchecked = 0
    spent = headers.read_seconds  # what was read before (the target) does not count
    for model in models:
        read = budget is None or headers.read_seconds - spent <= budget
        try:
            summary = headers.summary(model.path, read=read)
        except (SpecchatError, OSError) as exc:
            if on_error is not None:
                on_error(model, str(exc))
            continue
        if summary is None:
            unchecked += 1
        else:
            judged.append((model, summary))
    return judged, unchecked
