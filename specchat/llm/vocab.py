"""Can one model draft for another? Only if both speak exactly the same vocabulary.

Speculative acceptance compares the draft's and the target's probabilities of the same token
id, so id i must mean the same text in both models, the logits rows must have the same length,
and the special tokens (which end generation or start a turn) must sit at the same ids.
Pure: works on a VocabInfo the backend fills in, so it is testable without llama.cpp.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specchat.errors import UsageError

# How many differing token ids a message quotes before it says "...".
_EXAMPLES = 3


@dataclass(frozen=True)
class VocabInfo:
    """What decides vocabulary compatibility, as read from one model."""

    name: str  # for messages: the model's file name
    vocab_type: str  # "bpe", "spm", ...
    n_tokens: int
    specials: Mapping[str, int | None]  # "bos", "eos", "eot", "pad", ... -> id or None
    add_bos: bool
    add_eos: bool
    eog: frozenset[int]
    texts: Sequence[bytes] = field(repr=False)  # texts[i]: the stored text of token i


class HasVocabInfo(Protocol):
    """A loaded model (LlamaModel) that can describe its vocabulary."""

    def vocab_info(self) -> VocabInfo: ...


VocabSource = VocabInfo | HasVocabInfo


def compatibility_problems(a: VocabInfo, b: VocabInfo) -> list[str]:
    """Human-readable differences between two vocabularies; empty when they are the same."""
    problems: list[str] = []
    if a.vocab_type != b.vocab_type:
        problems.append(f"tokenizer type {a.vocab_type} vs {b.vocab_type}")
    if a.n_tokens != b.n_tokens:
        problems.append(f"vocabulary size {a.n_tokens} vs {b.n_tokens}")
    problems.extend(_special_problems(a, b))
    text_problem = _text_problem(a.texts, b.texts)
    if text_problem:
        problems.append(text_problem)
    return problems


def check_compatible(target: VocabSource, draft: VocabSource) -> None:
    """Raise UsageError naming every difference when `draft` cannot draft for `target`.

    Takes VocabInfo objects or loaded models (anything with a vocab_info() method).
    """
    target, draft = _info(target), _info(draft)
    problems = compatibility_problems(target, draft)
    if problems:
        raise UsageError(
            f"draft {draft.name} cannot draft for target {target.name}: "
            f"{'; '.join(problems)} (target vs draft)"
        )


def _info(source: VocabSource) -> VocabInfo:
    return source if isinstance(source, VocabInfo) else source.vocab_info()


def _special_problems(a: VocabInfo, b: VocabInfo) -> list[str]:
    problems = []
    for key in sorted(set(a.specials) | set(b.specials)):
        ia, ib = a.specials.get(key), b.specials.get(key)
        if ia != ib:
            problems.append(f"{key} token {_id(ia)} vs {_id(ib)}")
    if a.add_bos != b.add_bos:
        problems.append(f"adds BOS {_yes(a.add_bos)} vs {_yes(b.add_bos)}")
    if a.add_eos != b.add_eos:
        problems.append(f"adds EOS {_yes(a.add_eos)} vs {_yes(b.add_eos)}")
    if a.eog != b.eog:
        only_a, only_b = sorted(a.eog - b.eog), sorted(b.eog - a.eog)
        problems.append(
            f"end-of-generation tokens differ (only in first: {_ids(only_a)}; "
            f"only in second: {_ids(only_b)})"
        )
    return problems


def _text_problem(ta: Sequence[bytes], tb: Sequence[bytes]) -> str | None:
    """One line: how many of the shared ids have different texts, with the first few."""
    n = min(len(ta), len(tb))
    differing = [i for i in range(n) if ta[i] != tb[i]]
    if not differing:
        return None
    examples = ", ".join(f"id {i}: {_show(ta[i])} vs {_show(tb[i])}" for i in differing[:_EXAMPLES])
    more = ", ..." if len(differing) > _EXAMPLES else ""
    return f"{len(differing)} of {n} token texts differ ({examples}{more})"


def _show(text: bytes) -> str:
    return repr(text.decode("utf-8", errors="backslashreplace"))


def _id(token: int | None) -> str:
    return "none" if token is None else str(token)


def _ids(tokens: Sequence[int]) -> str:
    if not tokens:
        return "none"
    head = ", ".join(str(t) for t in tokens[:_EXAMPLES])
    return head + (", ..." if len(tokens) > _EXAMPLES else "")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
