"""A grammar for fake models: a finite automaton over token ids that implements the engine's
Constraint (specchat/engine/constraint.py), with exact masks, so tests can enumerate the
constrained distribution and check the engine against it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specchat.engine.constraint import ConstraintError
from specchat.engine.options import Structure
from specchat.llm.tools import ToolSet

# state -> {token: next state}; tokens missing from a state's map are forbidden there.
Table = Mapping[int, Mapping[int, int]]


class FakeGrammar:
    def __init__(self, table: Table, n_vocab: int, start: int = 0,
                 accepting: Sequence[int] = (), eog: Sequence[int] = ()) -> None:
        self.table = table
        self.n_vocab = n_vocab
        self.accepting = frozenset(accepting)
        self.eog = tuple(eog)
        self.states = [start]  # the state after each token taken in, the start first
        self.calls = {"allowed": 0, "advance": 0, "rollback": 0, "allows": 0}

    @property
    def state(self) -> int:
        return self.states[-1]

    def _next(self, state: int) -> Mapping[int, int]:
        edges = dict(self.table.get(state, {}))
        if state in self.accepting:
            edges.update(dict.fromkeys(self.eog, -1))  # -1: finished, nothing more
        return edges

    def allowed(self) -> np.ndarray:
        self.calls["allowed"] += 1
        mask = np.zeros(self.n_vocab, dtype=bool)
        mask[list(self._next(self.state))] = True
        return mask

    def advance(self, tokens: Sequence[int]) -> None:
        self.calls["advance"] += 1
        for token in tokens:
            nxt = self._next(self.state).get(int(token))
            if nxt is None:
                raise ConstraintError(f"token {token} is not allowed in state {self.state}")
            self.states.append(nxt)

    def rollback(self, n: int) -> None:
        self.calls["rollback"] += 1
        assert 0 <= n < len(self.states), f"cannot give back {n} of {len(self.states) - 1}"
        del self.states[len(self.states) - n:]

    def allows(self, tokens: Sequence[int]) -> int:
        self.calls["allows"] += 1
        state = self.state
        for i, token in enumerate(tokens):
            nxt = self._next(state).get(int(token))
            if nxt is None:
                return i
            state = nxt
        return len(tokens)

    def forced(self, limit: int) -> list[int]:
        out: list[int] = []
        state = self.state
        while len(out) < limit:
            edges = self._next(state)
            if len(edges) != 1:
                break
            (token, state), = edges.items()
            out.append(token)
        return out

    def complete(self) -> bool:
        return self.state in self.accepting or self.state == -1

    def sequences_allowed(self, tokens: Sequence[int]) -> bool:
        """Whether the grammar allows `tokens` from its start (for checks on outputs)."""
        state = self.states[0]
        for token in tokens:
            nxt = self._next(state).get(int(token))
            if nxt is None:
                return False
            state = nxt
        return True


# --- guides that write one JSON object ---------------------------------------------------
JSON_PIECES = [b'{"name": ', b'"Ann"', b', "age": ', b"7", b"}", b"<eos>"]
JSON_EOS = len(JSON_PIECES) - 1


class JsonGuides:
    """Guides that force the one JSON answer of JSON_PIECES, whatever was asked, and record
    what was asked."""

    def __init__(self) -> None:
        self.asked: list[Structure | None] = []

    def prompt(self, messages: Any, tools: ToolSet) -> list[int]:
        raise AssertionError("no tools here")

    def constraint(self, structure: Structure | None,
                   tools: ToolSet | None) -> FakeGrammar | None:
        self.asked.append(structure)
        table = {i: {i: i + 1} for i in range(JSON_EOS)}
        return FakeGrammar(table, len(JSON_PIECES), accepting=[JSON_EOS], eog=[JSON_EOS])
