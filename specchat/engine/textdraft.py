"""Drafting with a model of another vocabulary: its text, re-tokenized for the target.

Token ids of another vocabulary cannot be verified (acceptance compares both models'
probabilities of one id), but text can: the draft writes greedily, the target's tokens of that
text are proposed as a function of the context alone (a one-hot q, as in prompt lookup), and
the rejection rule keeps the answer exactly the target's at every temperature (acceptance.py).

Where tokens meet text (each model's side through a TextVocab, llm/textvocab.py):
- the draft reads the committed context as text (`Mirror`), a control token as the draft's
  control token of the same spelling (else plain text);
- an incomplete last character is cut, and the last target token dropped (more text could
  change it), unless the draft ended there;
- the draft's target tokens are cut out of a tokenization of the context's last few tokens'
  text plus the draft's, so a word split at the boundary is split as in context;
- plain-text tokenizing never yields a control token, and a draft's control token ends its
  text: no control token is ever proposed.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.engine.drafters import (
    DRAFT,
    UNSCORED,
    Draft,
    Drafter,
    ScoredDraft,
    StopRule,
    fill_cache,
)
from specchat.engine.protocol import ContextFullError, LogitsModel, common_prefix
from specchat.engine.sampling import top_probability

ANCHOR_TOKENS = 4  # context tokens whose text is tokenized with the draft's text
MARK_AFTER = 256  # a run longer than this (in target tokens) gets a restart mark inside...
MARK_MARGIN = 64  # ...at least this many tokens before its end, where both vocabularies cut


class TextVocab(Protocol):
    """One model's vocabulary as text."""

    @property
    def bos(self) -> int | None:
        """The token its prompts start with (None: it adds none)."""
        ...

    def piece(self, token: int) -> bytes:
        """The token's text (may be part of a UTF-8 character)."""
        ...

    def is_control(self, token: int) -> bool:
        """Whether the token is a control token (a turn marker, an end of text)."""
        ...

    def control(self, text: bytes) -> int | None:
        """The control token spelt `text`, if the vocabulary has one."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Plain text as tokens: no BOS added, special-token text stays text."""
        ...


@dataclass(frozen=True)
class TextVocabs:
    """The target's and the draft's vocabularies: how drafts travel between them."""

    target: TextVocab
    draft: TextVocab


def _whole_chars(data: bytes, final: bool = False) -> str:
    """`data` as text; an incomplete last character is cut (unless final), invalid bytes
    in the middle become U+FFFD."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=final)


class Mirror:
    """The committed target context as the draft's tokens.

    Re-tokenizing starts from the last mark: after a control token, or inside a long run
    where both vocabularies cut the text at the same byte, so a step tokenizes at most
    about MARK_AFTER tokens' text, and a cut-back context restarts from a mark before it.
    """

    def __init__(self, vocabs: TextVocabs) -> None:
        self.target, self.draft = vocabs.target, vocabs.draft
        self.seen: list[int] = []  # the target tokens mirrored
        start = [] if self.draft.bos is None else [self.draft.bos]
        self.tokens: list[int] = start  # the draft's tokens for them
        self.marks: list[tuple[int, int]] = [(0, len(start))]  # (seen, tokens) counts
        # A tokenizer that puts a space before every text it is given (older SentencePiece)
        # cannot restart inside a run without adding one: then runs restart whole.
        self._inner_marks = b"".join(map(self.draft.piece, self.draft.tokenize("a"))) == b"a"

    def update(self, context: Sequence[int]) -> list[int]:
        """The draft's tokens for `context` (a list the caller must not change)."""
        same = common_prefix(self.seen, context)
        while self.marks[-1][0] > same:
            self.marks.pop()
        if same == len(self.seen) == len(context):
            return self.tokens
        at, mine = self.marks[-1]
        del self.seen[at:], self.tokens[mine:]
        run: list[int] = []
        for token in context[at:]:
            if not self.target.is_control(token):
                run.append(token)
                continue
            self._add_run(run)
            run = []
            self.seen.append(token)
            if token != self.target.bos:  # the draft's own BOS starts its tokens
                self.tokens.extend(self._control(token))
            self.marks.append((len(self.seen), len(self.tokens)))
        self._add_run(run, last=True)
        return self.tokens

    def _control(self, token: int) -> list[int]:
        text = self.target.piece(token)
        mine = self.draft.control(text)
        return [mine] if mine is not None else self.draft.tokenize(_whole_chars(text, True))

    def _add_run(self, run: list[int], last: bool = False) -> None:
        if not run:
            return
        pieces = [self.target.piece(t) for t in run]
        data = b"".join(pieces)
        text = _whole_chars(data, final=not last)
        tokens = self.draft.tokenize(text) if text else []
        start, first = len(self.seen), len(self.tokens)
        self.seen.extend(run)
        self.tokens.extend(tokens)
        if last and self._inner_marks and len(run) > MARK_AFTER:
            self._mark_inside(pieces, data, tokens, start, first)

    def _mark_inside(self, pieces: list[bytes], data: bytes, tokens: list[int],
                     start: int, first: int) -> None:
        """A mark at the last byte, at least MARK_MARGIN tokens from the end, where both the
        target's and the draft's tokens of the run end."""
        mine = [self.draft.piece(t) for t in tokens]
        if b"".join(mine) != data:
            return  # the draft's tokenizer changed the text: no common cut to trust
        ends: dict[int, int] = {}
        pos = 0
        for j, piece in enumerate(mine):
            pos += len(piece)
            ends[pos] = j + 1
        pos, best = 0, None
        for i, piece in enumerate(pieces[: len(pieces) - MARK_MARGIN]):
            pos += len(piece)
            if pos in ends:
                best = (start + i + 1, first + ends[pos])
        if best is not None and best[0] > self.marks[-1][0]:
            self.marks.append(best)


def _incomplete_tail(data: bytes) -> bytes:
    """The bytes of an incomplete last character of `data` (b"" when it ends whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(data)
    return decoder.getstate()[0]


def _after(text: bytes, tail: bytes) -> bytes | None:
    """`text` past its first bytes `tail` (b"" while it has not written them all yet);
    None when it wrote something else."""
    if len(text) < len(tail):
        return b"" if tail.startswith(text) else None
    return text[len(tail):] if text.startswith(tail) else None


def continuation(target: TextVocab, anchor: bytes, text: bytes) -> list[int]:
    """The target's tokens for `text` written after `anchor` (the context's last tokens'
    text): cut out of the tokens of both where the context ends, else (a token would span
    that point) the tokens of `text` alone; [] when neither has a token boundary there."""
    while anchor and 0x80 <= anchor[0] < 0xC0:  # never start inside a character
        anchor = anchor[1:]
    found = _cut_after(target, anchor, text)
    if found is None and anchor:
        found = _cut_after(target, b"", text)
    return found or []


def _cut_after(target: TextVocab, anchor: bytes, text: bytes) -> list[int] | None:
    whole = _whole_chars(anchor + text).encode("utf-8")
    if len(whole) <= len(anchor) or not (anchor + text).startswith(whole):
        return []  # nothing whole yet, or bytes that are not UTF-8: nothing to try
    tokens = target.tokenize(whole.decode("utf-8"))
    pieces = [target.piece(t) for t in tokens]
    joined = b"".join(pieces)
    if not joined.endswith(whole):
        return []  # the tokenizer changed the text (normalization)
    # Past a prefix the tokenizer may add (a SentencePiece space), then past the anchor.
    cut, pos = len(joined) - len(whole) + len(anchor), 0
    for i, piece in enumerate(pieces):
        if pos == cut:
            return tokens[i:]
        pos += len(piece)
    return None


@dataclass
class _Scoring:
    """One TextDrafter draft under way."""

    k: int
    stop: StopRule | None
    found: list[int] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)
    evals: int = 0
    asked: int = 0  # how many tokens `stop` heard about

    def stops(self, n: int) -> bool:
        """Asks `stop` once about each new token, in order; True (and the draft cut there)
        once it says stop."""
        if self.stop is None:
            return False
        for i in range(self.asked, n):
            self.asked = i + 1
            if self.stop(i + 1, self.confidence[i]):
                del self.found[i + 1:]
                return True
        return False

    def result(self) -> ScoredDraft:
        n = min(len(self.found), self.k)
        if not n:
            return ScoredDraft(UNSCORED.draft, (), self.evals)
        draft = Draft(tuple(int(t) for t in self.found[:n]), None, DRAFT)
        return ScoredDraft(draft, tuple(self.confidence[:n]), self.evals)


class TextDrafter(Drafter):
    """Proposes the target tokens of a draft model's greedy text, with what `auto` asks of a
    draft model's drafter (`model`, `blind`, `lag`, `scored`)."""

    def __init__(self, model: LogitsModel, vocabs: TextVocabs) -> None:
        self.model = model
        self.vocabs = vocabs
        self.mirror = Mirror(vocabs)
        self.blind = False  # the context no longer fits the draft's cache

    def prepare(self, context: Sequence[int], fill: bool = True) -> None:
        """With fill=False the first propose() reads the prompt instead."""
        mine = self.mirror.update(context)
        self.blind = len(mine) >= self.model.n_ctx
        if fill and not self.blind and len(mine) > 1:
            fill_cache(self.model, mine[:-1])

    def lag(self, context: Sequence[int]) -> int:
        """How many of the context's tokens (before its last) the draft's cache lacks, in
        the draft's own tokens."""
        mine = self.mirror.update(context)
        return len(mine) - 1 - common_prefix(self.model.tokens, mine[:-1])

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> Draft:
        return self.scored(context, k, rng).draft

    def scored(self, context: Sequence[int], k: int, rng: np.random.Generator,
               stop: StopRule | None = None) -> ScoredDraft:
        """As DraftModelDrafter.scored; a token's confidence is the lowest top probability
        of the draft tokens that wrote it."""
        if k <= 0 or not context or self.blind:
            return UNSCORED
        mine = self.mirror.update(context)
        if not mine:
            return UNSCORED  # no text the draft can read yet
        if len(mine) >= self.model.n_ctx:
            self.blind = True
            return UNSCORED
        scoring = _Scoring(k, stop)
        try:
            self._draft(context, mine, k, scoring)
        except ContextFullError:  # the cache is whatever it is; the next step compares
            return ScoredDraft(UNSCORED.draft, (), scoring.evals)
        return scoring.result()

    def _draft(self, context: Sequence[int], mine: list[int], k: int,
               scoring: _Scoring) -> None:
        model, draft = self.model, self.vocabs.draft
        keep = min(common_prefix(model.tokens, mine), len(mine) - 1)
        model.truncate(keep)
        logits = model.eval(mine[keep:], [-1])[0]
        scoring.evals = 1
        anchor = self._anchor(context)
        # The draft read the context without its incomplete last character (Mirror): its
        # text must write those bytes again, and they are not proposed twice.
        tail = _incomplete_tail(anchor)
        text, low = b"", 1.0
        budget = min(2 * k + 4, model.n_ctx - len(mine) + 1)
        for n in range(budget):
            token = int(np.argmax(logits))
            ended = token in model.eog_tokens or draft.is_control(token)
            if not ended:
                low = min(low, top_probability(logits))
                text += draft.piece(token)
            own = _after(text, tail)
            if own is None:
                break  # the draft rewrote the context's last character otherwise
            tokens = continuation(self.vocabs.target, anchor, own)
            stable = tokens if ended else tokens[:-1]  # more text could change the last
            if len(stable) > len(scoring.found):
                scoring.confidence += [low] * (len(stable) - len(scoring.confidence))
                scoring.found, low = stable, 1.0
                if len(scoring.found) >= k or scoring.stops(len(scoring.found)):
                    break
            if ended:
                break
            if n + 1 < budget:
                logits = model.eval([token], [-1])[0]
                scoring.evals += 1

    def _anchor(self, context: Sequence[int]) -> bytes:
        """The text of the context's last few tokens, back to its last control token."""
        target, out = self.vocabs.target, b""
        for token in reversed(context[-ANCHOR_TOKENS:]):
            if target.is_control(token):
                break
            out = target.piece(token) + out
        return out
