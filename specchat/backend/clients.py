"""A server's clients kept apart: each drafts from its own store and learns in its own `auto`.

`specchat serve` answers people other than its owner, and what one of them asks must never
shape what another is drafted or told (docs/security.md, "The drafting store"):

- each client (an API key; on a server without keys, everyone together) has a drafting store
  of its own, in a folder named by a hash of its key: a key never becomes a path;
- the owner's own store (what `ask` and `chat` keep) is read only when the server is told to
  (--draft-from-chats), and never written;
- each client's `auto` starts from the machine's measured costs and the priors, and learns
  acceptance from its own answers only;
- an answer to a request that says `"store": false` is not written;
- the KV cache is emptied before an answer for another client than the last one, so the
  prompt tokens reused (`usage.prompt_tokens_details.cached_tokens`) never tell one client
  how another's prompt began.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specchat.backend.draftstore import DraftStore
from specchat.engine.auto import AutoState
from specchat.engine.suffix import KEY_LEN, SuffixIndex

EVERYONE = "open"  # the one client of a server without API keys


class DraftSource(Protocol):
    """What an answer drafts from and adds to: one store, or a Drafting of several."""

    @property
    def writable(self) -> bool: ...

    def index(self, n_vocab: int) -> SuffixIndex: ...

    def append(self, tokens: Sequence[int], tag: int) -> None: ...


@dataclass(frozen=True)
class Client:
    """Whom an answer is for, as a server tells them apart."""

    name: str  # client_name(): a folder name, never the key itself
    keep: bool = True  # False: this answer is not written to the client's store


def client_name(key: str | None) -> str:
    """The folder name of a key's store: a hash (a key is a secret and no path)."""
    if key is None:
        return EVERYONE
    return hashlib.sha256(b"specchat serve client\0" + key.encode()).hexdigest()[:32]


class Drafting:
    """Drafts from every store in `reads`, adds answers to `writes` (None: to none)."""

    def __init__(self, reads: Sequence[DraftStore], writes: DraftStore | None) -> None:
        self.reads = tuple(reads)
        self.writes = writes

    @property
    def writable(self) -> bool:
        return self.writes is not None and self.writes.writable

    def index(self, n_vocab: int) -> SuffixIndex:
        segments = sorted((s for store in self.reads for s in store.segments()),
                          key=lambda s: s.newest)
        k = self.reads[0].k if self.reads else KEY_LEN
        return SuffixIndex([s.segment for s in segments], n_vocab, k)

    def append(self, tokens: Sequence[int], tag: int) -> None:
        if self.writes is not None:
            self.writes.append(tokens, tag)


@dataclass
class Clients:
    """Each client's own store and `auto` state, opened on its first answer."""

    own_store: Callable[[str], DraftStore | None]  # a client's store by name (None: none)
    fresh_auto: Callable[[], AutoState]  # the machine's prices, nothing learnt from others
    chats: DraftStore | None = None  # the owner's store, read only (--draft-from-chats)
    last: str | None = None  # the client whose prompt the KV cache holds
    _states: dict[str, tuple[DraftStore | None, AutoState]] = field(default_factory=dict)

    def enter(self, client: Client) -> tuple[Drafting | None, AutoState, bool]:
        """What `client`'s answer drafts from and adds to, its `auto` state, and whether
        the KV cache holds another client's prompt (which the caller then empties)."""
        if client.name not in self._states:
            self._states[client.name] = (self.own_store(client.name), self.fresh_auto())
        own, auto = self._states[client.name]
        switched = self.last is not None and self.last != client.name
        self.last = client.name
        reads = [s for s in (self.chats, own) if s is not None]
        drafting = Drafting(reads, own if client.keep else None) if reads else None
        return drafting, auto, switched
