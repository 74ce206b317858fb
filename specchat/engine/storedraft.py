"""The `store` drafter: drafts from the drafting store of earlier prompts and answers.

Each step the context's suffix is looked up in the store (engine/suffix.py) and in the
context itself; what followed the occurrences becomes a trie of candidates. Each node is
calibrated by its kind (match-length bucket x support class, docs/drafting.md): P(the target
writes this node's token | it wrote the parent's), because whether the occurrences agree and
how many support a node predicts that best. The calibration is learnt for free: the tokens
the target commits score every candidate of the last lookup, drafted or not (cost.Shadow).

`propose` takes nodes by the probability of reaching them as long as expected tokens per
second grow on the cost table: a short chain on a CPU, a wide tree priced like a GPU. The
draft carries its expected speedup, which `auto` weighs against its other drafters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from specchat.engine.contextindex import ContextIndex
from specchat.engine.cost import AcceptanceModel, CostTable, Shadow
from specchat.engine.drafters import EMPTY_DRAFT, NGRAM, STORE, Draft, Drafter
from specchat.engine.suffix import Matches, SuffixIndex
from specchat.engine.tree import TreeDraft

MAX_OCCURRENCES = 24  # most recent occurrences of a suffix that vote on continuations
DEPTH = 16  # how far each occurrence's continuation is followed
MAX_NODES = 64  # most candidates verified in one batch
SIBLING_MASS = 0.98  # the calibrated children of a node never claim more than this
MIN_REACH = 0.02  # nodes the target is less likely to reach are never worth a batch row
FIT_DECAY = 0.8  # per step: how fast the pooled hits/predicted ratio forgets
FIT_PRIOR = 3.0  # predicted hits' worth of trust in the calibration before any evidence
MATCH_BUCKETS = (3, 4, 6, 10)  # edges of the matched length (lookup match + depth - 1)
# Support classes: competing continuations followed by one occurrence / by more; a sole
# continuation followed by one, two, three or more.
CONTESTED_ONE, CONTESTED_MORE, SOLE_ONE, SOLE_TWO, SOLE_MORE = range(5)
# P(the target writes the node's token | it wrote the parent's), before observations, by
# length bucket and support class: the built-in sessions' lookups (docs/drafting.md),
# rounded down. Refined by what each process observes (and kept across processes).
STORE_PRIORS = (
    (0.12, 0.20, 0.55, 0.80, 0.85),
    (0.08, 0.15, 0.62, 0.82, 0.92),
    (0.10, 0.20, 0.68, 0.72, 0.92),
    (0.12, 0.30, 0.85, 0.92, 0.96),
    (0.10, 0.30, 0.85, 0.92, 0.96),
)


@dataclass(frozen=True)
class CandidateTree:
    """The distinct continuations of a set of occurrences as a trie, parents before children."""

    tokens: np.ndarray  # int64 (n,)
    parent: np.ndarray  # int64 (n,), -1 for the root's children
    depth: np.ndarray  # int64 (n,), 1 for the root's children
    count: np.ndarray  # int64 (n,): occurrences through the node
    stored: np.ndarray  # int64 (n,): of those, occurrences in the store
    # int64 (rows, depth): the node each occurrence's continuation reaches at each depth
    # (-1 past its end), rows in the order they were given: paths for products along them.
    paths: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)


def continuation_tree(following: np.ndarray, stored: np.ndarray) -> CandidateTree:
    """The trie of `following` rows (at least one; -1 pads a row's end); `stored` flags the
    rows that are occurrences in the store."""
    c, depth = following.shape
    if c == 1:  # half of all lookups: one occurrence, so the trie is its row as a chain
        return _chain(following[0], bool(stored[0]))
    order = np.lexsort(following.T[::-1])
    rows = following[order]
    valid = rows >= 0
    # A row opens a new node at depth d when its prefix up to d differs from the row before.
    diff = np.ones_like(rows, dtype=bool)
    diff[1:] = np.logical_or.accumulate(rows[1:] != rows[:-1], axis=1)
    opens = diff & valid
    per_depth = opens.sum(axis=0)
    offsets = np.concatenate(([0], np.cumsum(per_depth)[:-1]))
    ids = np.cumsum(opens, axis=0) - 1 + offsets[None, :]
    ids[~valid] = -1
    n = int(per_depth.sum())
    flat = ids[valid]
    tokens = np.empty(n, dtype=np.int64)
    tokens[flat] = rows[valid]
    parent = np.empty(n, dtype=np.int64)
    parent[flat] = np.hstack([np.full((c, 1), -1), ids[:, :-1]])[valid]
    in_store = np.bincount(ids[valid & np.asarray(stored, bool)[order][:, None]], minlength=n)
    paths = np.empty_like(ids)
    paths[order] = ids
    # Node ids are numbered depth by depth.
    return CandidateTree(tokens, parent, np.repeat(np.arange(1, depth + 1), per_depth),
                         np.bincount(flat, minlength=n), in_store, paths)


def _chain(row: np.ndarray, stored: bool) -> CandidateTree:
    """continuation_tree of a single row."""
    n = int(np.argmin(row >= 0)) if (row < 0).any() else len(row)
    depth = np.arange(1, n + 1, dtype=np.int64)
    ones = np.ones(n, dtype=np.int64)
    paths = np.full((1, len(row)), -1, dtype=np.int64)
    paths[0, :n] = depth - 1
    return CandidateTree(row[:n].astype(np.int64), depth - 2, depth, ones, ones * int(stored),
                         paths)


def support_class(tree: CandidateTree) -> np.ndarray:
    """Each node's support class: whether it is its parent's only child, and how many
    occurrences continued through it."""
    siblings = np.bincount(tree.parent + 1, minlength=len(tree) + 1)[tree.parent + 1]
    sole = siblings == 1
    more = np.minimum(tree.count, 3)
    return np.where(sole, SOLE_ONE + more - 1, np.where(more > 1, CONTESTED_MORE,
                                                        CONTESTED_ONE))


def store_prior(bucket: int, support: int) -> float:
    return STORE_PRIORS[bucket][support]


@dataclass
class _Shadow:
    """The candidates of the last lookup, to be scored against what the target wrote."""

    start: int  # the context's length at the lookup
    tree: CandidateTree
    bucket: np.ndarray  # calibration key of every node: (length bucket, support class)
    support: np.ndarray
    predicted: np.ndarray  # the conditional acceptance the plan assumed for every node


Models = Callable[[Hashable], AcceptanceModel]


class StoreDrafter(Drafter):
    """`context` is prompt lookup's index where it keys the store's k-grams (build.py)."""

    def __init__(self, index: SuffixIndex, models: Models, costs: CostTable,
                 branches: int = 1, clock: Callable[[], float] = time.perf_counter,
                 context: ContextIndex | None = None) -> None:
        self.index = index
        self.context = context if context is not None and context.k == index.k else \
            ContextIndex(index.k, index.k, index.k)
        self.models = models
        self.costs = costs
        self.clock = clock
        self.branches = max(1, branches)
        self._shadow: _Shadow | None = None
        self.lookup_seconds = 0.0  # running mean of one plan's cost, charged to drafting
        self._rates = np.zeros(np.shape(STORE_PRIORS))  # calibrated rate per (bucket, class)
        # Entries of _rates to read again, in order: all at first, then those observed since.
        self._stale = dict.fromkeys(np.ndindex(self._rates.shape))
        # Hits and predicted hits of recently scored candidates (decaying): how far this
        # text departs from the calibration, pooled over every kind of node.
        self._hits = self._predicted = 0.0

    @staticmethod
    def key(bucket: int, support: int) -> tuple[str, int, int]:
        return (STORE, int(bucket), int(support))

    def rates(self) -> np.ndarray:
        """The calibrated acceptance of every (length bucket, support class)."""
        for b, s in self._stale:
            self._rates[b, s] = self.models(self.key(b, s)).rate(1)
        self._stale.clear()
        return self._rates

    def propose(self, context: Sequence[int], k: int,
                rng: np.random.Generator | None = None) -> Draft | TreeDraft:
        """Empty when nothing matches or no draft is expected to beat a plain step."""
        start = self.clock()
        self.observe(context)
        found = self._candidates(context)
        draft: Draft | TreeDraft = EMPTY_DRAFT
        if found is not None and k > 0:
            self._shadow, reach = found
            draft = _best_subtree(self._shadow.tree, reach, self.costs, self.lookup_seconds,
                                  k, self.branches)
        self.lookup_seconds += 0.1 * ((self.clock() - start) - self.lookup_seconds)
        return draft

    @property
    def last_candidates(self) -> tuple[CandidateTree, np.ndarray, np.ndarray] | None:
        """The last lookup's trie with each node's length bucket and support class, until it
        is scored (for statistics: benchmarks/session_replay.py)."""
        s = self._shadow
        return None if s is None else (s.tree, s.bucket, s.support)

    def observe(self, context: Sequence[int]) -> None:
        """Score the last lookup's candidates against the tokens committed since: each child
        of a node the target reached is one trial for its kind, a hit when it is the token
        the target wrote there."""
        last, self._shadow = self._shadow, None
        if last is None or len(context) <= last.start:
            return
        self._hits *= FIT_DECAY
        self._predicted *= FIT_DECAY
        for kids, hit in Shadow(last.start, last.tree.tokens, last.tree.parent).walk(context):
            for c in kids:
                key = (int(last.bucket[c]), int(last.support[c]))
                self.models(self.key(*key)).observe(1, int(c == hit))
                self._stale[key] = None
                self._hits += c == hit
                self._predicted += float(last.predicted[c])

    def _variable(self, m: Matches, candidates: np.ndarray) -> np.ndarray:
        """Which of `candidates` (occurrences in the store) are followed by two tokens their
        earlier answer had copied from its own request, and this request does not hold: a
        value (a name, an id) that this answer will copy from its own request instead, so
        they do not vote on what comes next here (docs/drafting.md has the numbers)."""
        out = np.zeros(len(m), dtype=bool)
        idx = np.flatnonzero(candidates)
        idx = idx[[not self.context.has_pair(a, b) for a, b in m.following[idx, :2].tolist()]]
        if len(idx):
            out[idx] = self.index.copied(m.segment[idx], m.position[idx], m.following[idx])
        return out

    def _candidates(self, context: Sequence[int]) -> tuple[_Shadow, np.ndarray] | None:
        """The trie of continuations, and the calibrated P(the target reaches each node)."""
        self.context.sync(context)
        # This answer's own occurrences first (the most recent), then the store's.
        found = [m for m in (
            self.context.lookup(max_occurrences=MAX_OCCURRENCES, depth=DEPTH,
                                n_vocab=self.index.n_vocab),
            self.index.lookup(context, max_occurrences=MAX_OCCURRENCES, depth=DEPTH))
            if m is not None]
        if not found:
            return None
        m = Matches.joined(found)
        stored = m.segment >= 0
        # The longest matches speak for the context; shorter ones only when nothing longer
        # was found (a suffix tree's deepest node, with its counts). Copies of one text
        # count once (the most recent).
        best = int(m.length.max())
        chosen = m.length >= min(best, max(self.index.k, best - 2))
        first = np.zeros(len(m), dtype=bool)
        first[np.unique(m.text, return_index=True)[1]] = True
        chosen &= first
        chosen &= ~self._variable(m, chosen & stored)
        if not chosen.any():
            return None
        tree = continuation_tree(m.following[chosen], stored[chosen])
        if not len(tree):
            return None
        bucket = np.searchsorted(MATCH_BUCKETS, best + tree.depth - 1, side="right")
        support = support_class(tree)
        fit = (self._hits + FIT_PRIOR) / (self._predicted + FIT_PRIOR)
        rates = np.minimum(self.rates()[bucket, support] * min(fit, 1.0), 0.99)
        cond, reach = _reach(tree, rates)
        return _Shadow(len(context), tree, bucket, support, cond), reach


def _reach(tree: CandidateTree, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each node's conditional acceptance (siblings scaled so that they never claim more
    than SIBLING_MASS together) and P(the target walks to it): their product along its
    path."""
    mass = np.bincount(tree.parent + 1, weights=rates, minlength=len(tree) + 1)
    scale = np.minimum(1.0, SIBLING_MASS / np.maximum(mass[tree.parent + 1], 1e-12))
    cond = rates * scale
    # Along each occurrence's path the product of the nodes' rates: every node is on some
    # occurrence's path, and all paths through a node agree on its ancestors.
    ids = tree.paths
    on = ids >= 0
    products = np.cumprod(np.where(on, cond[np.maximum(ids, 0)], 1.0), axis=1)
    reach = np.empty(len(tree))
    reach[ids[on]] = products[on]
    return cond, reach


def _best_subtree(tree: CandidateTree, reach: np.ndarray, costs: CostTable,
                  lookup_seconds: float, limit: int, branches: int) -> Draft | TreeDraft:
    """Nodes in order of reach, within `limit` depth and `branches` leaves, for as long as
    expected tokens per second keep the best value seen (every step pays `lookup_seconds`
    for it); empty when a plain step is best."""
    order = np.lexsort((tree.depth, -reach))[: MAX_NODES + 16]
    order = order[reach[order] >= MIN_REACH].tolist()
    # Plain lists: the loop reads one node at a time, and numpy scalars cost more than it.
    parent, depth, p = tree.parent.tolist(), tree.depth.tolist(), reach.tolist()
    price = costs.costs(min(len(order), MAX_NODES) + 1)
    plain = 1.0 / (price[0] + lookup_seconds)
    taken: list[int] = []
    chosen: set[int] = set()
    has_kids: set[int] = set()  # -1 once a child of the root is taken
    leaves = 0
    tokens, best, best_n = 1.0, 1.0, 0
    for i in order:
        par = parent[i]
        if depth[i] > limit or (par >= 0 and par not in chosen):
            continue
        sibling = par in has_kids  # a new branch: one more leaf (else it extends a leaf)
        if sibling and leaves >= branches:
            continue
        leaves += 1 if sibling or not taken else 0
        has_kids.add(par)
        taken.append(i)
        chosen.add(i)
        tokens += p[i]
        gain = tokens / (price[len(taken)] + lookup_seconds) / plain
        if gain > best:
            best, best_n = gain, len(taken)
        if len(taken) >= MAX_NODES:
            break
    if best_n == 0:
        return EMPTY_DRAFT
    return _as_draft(tree, taken[:best_n], reach, best)


def _as_draft(tree: CandidateTree, nodes: list[int], reach: np.ndarray,
              expected_speedup: float) -> Draft | TreeDraft:
    """The chosen nodes depth first, most likely child first (so that when the likeliest
    branch wins, the cache ends up laid out exactly as after a chain: llm/seqtree.py)."""
    parent_of, token_of, p = tree.parent.tolist(), tree.tokens.tolist(), reach.tolist()
    kids: dict[int, list[int]] = {}
    for i in nodes:
        kids.setdefault(parent_of[i], []).append(i)
    tokens: list[int] = []
    parents: list[int] = []
    stack = [(c, -1) for c in sorted(kids.get(-1, []), key=p.__getitem__)]
    while stack:
        node, parent_row = stack.pop()
        row = len(tokens)
        tokens.append(token_of[node])
        parents.append(parent_row)
        stack.extend((c, row) for c in sorted(kids.get(node, []), key=p.__getitem__))
    # Attributed to the store when any drafted node was seen there (else: this answer).
    source = STORE if tree.stored[nodes].any() else NGRAM
    if all(p == i - 1 for i, p in enumerate(parents)):
        return Draft(tuple(tokens), None, source, expected_speedup)
    return TreeDraft(tuple(tokens), tuple(parents), source, expected_speedup)
