"""Grammars for constrained decoding, on llguidance: JSON (any object, or a JSON schema),
llama.cpp's GBNF, llguidance's Lark dialect, and the tool-call grammars of llm/tools.py.

`Grammars` belongs to one target model: it builds llguidance's tokenizer from the model's
vocabulary (once, about a second, on the first constrained answer) and compiles each answer's
grammar into a `Matcher`, which implements the engine's Constraint (engine/constraint.py).
The engine never sees llguidance: only masks, tokens taken in and given back. The grammar
texts themselves are written by llm/lark.py and llm/tools.py, which need no llguidance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.llamacpp
import llguidance.numpy
import numpy as np

from specchat.engine.constraint import ConstraintError
from specchat.engine.options import Structure
from specchat.llm.lark import GrammarError, one_line, structure_lark

if TYPE_CHECKING:
    from specchat.llm.model import LlamaModel

class Grammars:
    """Compiles grammars for one model's vocabulary (the tokenizer is built on first use)."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._tokenizer: Any = None

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            model = self.model
            eos = model.eos_token
            # Every end-of-generation token may end a finished grammar, the model's EOS first.
            eog = [eos] if eos is not None else []
            eog += sorted(t for t in model.eog_tokens if t != eos)
            self._tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(
                model.vocab_handle, n_vocab=model.n_vocab, eos_token=eog)
        return self._tokenizer

    def special_token(self, text: str) -> int | None:
        """The id of a special token written `text` (e.g. <tool_call>), if the model has one:
        a grammar must name it as a token, since no text lexeme ever matches it."""
        ids = self.model.tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1 and self.tokenizer.is_special_token(ids[0]):
            return int(ids[0])
        return None

    def check(self, lark: str) -> str:
        """The grammar in llguidance's form, or GrammarError saying what is wrong with it."""
        grammar = llguidance.LLMatcher.grammar_from_lark(lark)
        problem = llguidance.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if problem:
            raise GrammarError(one_line(problem))
        return str(grammar)

    def matcher(self, lark: str) -> Matcher:
        """A fresh constraint for one answer."""
        grammar = self.check(lark)
        inner = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if inner.is_error():
            raise GrammarError(one_line(inner.get_error()))
        return Matcher(inner, self.model.n_vocab)

    def structure(self, structure: Structure) -> Matcher:
        return self.matcher(structure_lark(structure, strict=structure.strict))


class Matcher:
    """llguidance's matcher as the engine's Constraint, for one answer."""

    def __init__(self, inner: Any, n_vocab: int) -> None:
        self.inner = inner
        self.n_vocab = n_vocab
        self._bits = llguidance.numpy.allocate_token_bitmask(1, n_vocab)
        self._mask: np.ndarray | None = None  # the mask of the current state, once computed
        # Per token taken in, whether llguidance counted it: an end token taken in after the
        # grammar already stopped (its last byte written) is not, and rolling back must not
        # give back one token too many for it.
        self._counted: list[bool] = []

    def allowed(self) -> np.ndarray:
        if self._mask is None:
            llguidance.numpy.fill_next_token_bitmask(self.inner, self._bits)
            self._raise_on_error()
            bits = np.unpackbits(self._bits[0].view(np.uint8), bitorder="little")
            self._mask = bits[: self.n_vocab].astype(bool)
            if not self._mask.any():
                raise ConstraintError("the grammar allows no token here")
        return self._mask

    def advance(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self._mask = None
            stopped = bool(self.inner.is_stopped())
            if not self.inner.consume_token(int(token)):
                raise ConstraintError(f"the grammar refused token {token}: "
                                      f"{one_line(self.inner.get_error())}")
            self._counted.append(not stopped)

    def rollback(self, n: int) -> None:
        if n:
            self._mask = None
            given = self._counted[len(self._counted) - n:]
            del self._counted[len(self._counted) - n:]
            if not self.inner.rollback(sum(given)):
                self._raise_on_error()

    def allows(self, tokens: Sequence[int]) -> int:
        return int(self.inner.validate_tokens([int(t) for t in tokens])) if tokens else 0

    def forced(self, limit: int) -> Sequence[int]:
        if limit <= 0:
            return ()
        return [int(t) for t in self.inner.compute_ff_tokens()[:limit]]

    def complete(self) -> bool:
        return bool(self.inner.is_accepting() or self.inner.is_stopped())

    def _raise_on_error(self) -> None:
        if self.inner.is_error():
            raise ConstraintError(f"the grammar failed: {one_line(self.inner.get_error())}")
