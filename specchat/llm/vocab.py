"""Can one model draft for another? Only if both speak the same vocabulary, up to padding.

Speculative acceptance compares the draft's and the target's probabilities of the same token
id, so every id both models have must mean the same text (and be the same kind of token) in
both, both must split text the same way (tokenizer type and pre-tokenizer), and the special
tokens (which end generation or start a turn) must sit at the same ids. The sizes may differ
by a little: a family's large models often store a few unused padding ids past the end that
its small models do not (Qwen2.5 7B+ 152064 ids, 0.5B-3B 151936). Up to MAX_VOCAB_PADDING
such ids are allowed, as llama.cpp allows; the engine keeps acceptance exact across them
(specchat/engine/padding.py). Pure: works on a VocabInfo the backend fills in, so it is
testable without llama.cpp.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.engine.padding import MAX_VOCAB_PADDING
from specchat.errors import UsageError

# enum llama_vocab_type, by value.
VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}

# How many differing token ids a message quotes before it says "...".
_EXAMPLES = 3

# enum llama_token_attr: the bits that say what kind of token an id is.
_TYPE_BITS = {1: "unknown", 2: "unused", 4: "normal", 8: "control", 16: "user-defined",
              32: "byte"}


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
    pre: str = ""  # the pre-tokenizer (GGUF tokenizer.ggml.pre; "" when the file has none)
    # types[i]: token i's llama_token_attr bits (kind, plus strip/normalize flags); empty
    # when unknown, which compares equal to anything.
    types: Sequence[int] | np.ndarray = field(default=(), repr=False)


class HasVocabInfo(Protocol):
    """A loaded model (LlamaModel) that can describe its vocabulary."""

    def vocab_info(self) -> VocabInfo: ...


VocabSource = VocabInfo | HasVocabInfo


def compatibility_problems(a: VocabInfo, b: VocabInfo) -> list[str]:
    """Human-readable differences between two vocabularies; empty when one can draft for the
    other (sizes within MAX_VOCAB_PADDING of each other count as compatible)."""
    problems: list[str] = []
    if a.vocab_type != b.vocab_type:
        problems.append(f"tokenizer type {a.vocab_type} vs {b.vocab_type}")
    if a.pre != b.pre:
        problems.append(f"pre-tokenizer {a.pre or 'none'} vs {b.pre or 'none'}")
    if abs(a.n_tokens - b.n_tokens) > MAX_VOCAB_PADDING:
        problems.append(f"vocabulary size {a.n_tokens} vs {b.n_tokens} (sizes may differ by "
                        f"at most {MAX_VOCAB_PADDING} padding tokens)")
    problems.extend(_special_problems(a, b))
    for problem in (_text_problem(a.texts, b.texts), _type_problem(a, b)):
        if problem:
            problems.append(problem)
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


@dataclass(frozen=True)
class VocabPrint:
    """A vocabulary in a few hundred bytes, for telling which files can draft for which
    without reading their vocabularies again (models/headers.py keeps them on disk).

    Two prints are compatible exactly when compatibility_problems() of the two vocabularies is
    empty (up to a hash collision): `head` digests everything that must be equal whatever the
    sizes (tokenizer, pre-tokenizer, special ids, BOS/EOS flags, end-of-generation ids), and
    `tails[j]` the texts and kinds of ids below `first + j`, for every size within
    MAX_VOCAB_PADDING of n_tokens: the only prefix lengths a compatible partner compares.
    """

    n_tokens: int
    head: str
    tails: tuple[str, ...]

    @property
    def first(self) -> int:
        return self.n_tokens + 1 - len(self.tails)

    def prefix(self, m: int) -> str | None:
        """The digest of ids below m, when m is a size this print can be compared at."""
        j = m - self.first
        return self.tails[j] if 0 <= j < len(self.tails) else None


def vocab_print(info: VocabInfo) -> VocabPrint:
    """The print of a vocabulary (one pass over its ids: ~0.1 s for 150k)."""
    n = info.n_tokens
    head = repr((info.vocab_type, info.pre, sorted(info.specials.items()), info.add_bos,
                 info.add_eos, sorted(info.eog)))
    first = max(0, n - MAX_VOCAB_PADDING)
    types = np.asarray(info.types, dtype=np.int64) if len(info.types) else None
    texts_h, types_h = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)

    def feed(lo: int, hi: int) -> None:
        texts_h.update(b"".join(len(t).to_bytes(4, "little") + t for t in info.texts[lo:hi]))
        if types is not None:
            types_h.update(types[lo:hi].tobytes())

    feed(0, first)
    tails = []
    for m in range(first, n + 1):
        if m > first:
            feed(m - 1, m)
        tails.append(hashlib.blake2b(texts_h.copy().digest() + types_h.copy().digest()
                                     + (b"t" if types is not None else b"-"),
                                     digest_size=12).hexdigest())
    return VocabPrint(n, hashlib.blake2b(head.encode(), digest_size=16).hexdigest(),
                      tuple(tails))


def prints_compatible(a: VocabPrint, b: VocabPrint) -> bool:
    """Whether one can draft for the other: compatibility_problems' rule on two prints."""
    if a.head != b.head or abs(a.n_tokens - b.n_tokens) > MAX_VOCAB_PADDING:
        return False
    m = min(a.n_tokens, b.n_tokens)
    return a.prefix(m) is not None and a.prefix(m) == b.prefix(m)


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
    # map() compares pairs in C and stops at the shorter list: no Python loop over 150k ids.
    n = min(len(ta), len(tb))
    differing = np.flatnonzero(np.fromiter(map(operator.ne, ta, tb), dtype=bool, count=n))
    if not len(differing):
        return None
    examples = ", ".join(f"id {i}: {_show(ta[i])} vs {_show(tb[i])}"
                         for i in differing[:_EXAMPLES])
    more = ", ..." if len(differing) > _EXAMPLES else ""
    return f"{len(differing)} of {n} token texts differ ({examples}{more})"


def _type_problem(a: VocabInfo, b: VocabInfo) -> str | None:
    """One line: how many shared ids are a different kind of token, with the first few."""
    if not len(a.types) or not len(b.types):
        return None
    n = min(len(a.types), len(b.types))
    differing = np.flatnonzero(np.asarray(a.types[:n]) != np.asarray(b.types[:n]))
    if not len(differing):
        return None
    examples = ", ".join(
        f"id {i} {_show(a.texts[i]) if i < len(a.texts) else ''}: "
        f"{_kind(a.types[i])} vs {_kind(b.types[i])}" for i in differing[:_EXAMPLES])
    more = ", ..." if len(differing) > _EXAMPLES else ""
    return f"{len(differing)} of {n} token types differ ({examples}{more})"


def _kind(attr: int) -> str:
    """A token attribute as words: its kind, plus 'with flags N' if only the flags differ."""
    attr = int(attr)
    kinds = [name for bit, name in _TYPE_BITS.items() if attr & bit] or ["undefined"]
    rest = attr & ~sum(_TYPE_BITS)
    return "+".join(kinds) + (f" (flags {rest:#x})" if rest else "")


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
