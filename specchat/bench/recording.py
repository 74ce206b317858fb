"""Recorded acceptance: what the target writes and what a draft model would have proposed.

Acceptance is a property of the models and the text; cost is a property of the hardware. So
the models are run once, greedy, on this machine, and what they did is kept as data: for
each prompt, the target's own plain answer, and for every position of it the token the draft
model would propose next there (the draft teacher-forced along the target's answer, in a few
batched evals instead of one eval per token). A priced replay (replay.py) then runs the
engine's policies on that data against any cost profile, without the models.

Why that is enough for greedy decoding: a draft proposed at answer position i is accepted
token by token for as long as it equals the target's answer; its j-th token is the draft's
greedy choice after prompt + answer[:i] + the first j-1 draft tokens, which is `draft[i+j-1]`
for as long as the earlier draft tokens were right, and never matters after the first wrong
one. Prompt lookup needs nothing recorded: its proposals are a function of the tokens. With
each proposal the draft's confidence is kept (the probability it gives its own token), which
`auto` uses to decide how far to draft.

The file (JSON, version 1; docs/gpu.md has an example):
    {"format": "specchat-acceptance-recording", "version": 1, "target": NAME, "draft": NAME,
     "source": PROMPTS, "max_tokens": N, "eog": [ids], "prompts": [
        {"question_id": ..., "category": ..., "prompt": [ids], "answer": [ids],
         "finish": "eog" | "length" | ..., "draft": [ids, one per answer token] or null,
         "draft_p": [the draft's probability of each of those, 3 decimals] or null}]}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat import fileio, fileread
from specchat.backend.local import Runtime
from specchat.bench.prompts import BenchPrompt
from specchat.engine.drafters import fill_cache
from specchat.engine.events import Finished, drain
from specchat.engine.options import GenerationOptions, SamplingOptions, Spec
from specchat.engine.padding import shared_logits
from specchat.engine.protocol import LogitsModel
from specchat.engine.sampling import greedy_token, top_probability
from specchat.errors import UsageError

FORMAT = "specchat-acceptance-recording"
VERSION = 1
ROWS_PER_EVAL = 64  # logits rows per teacher-forced eval: 64 x 152k floats is 39 MB
MAX_IDS = 1 << 24  # no real vocabulary comes near; a bigger id is a corrupt file
FILE_LIMIT = 512 << 20  # a recording's bytes at most (the built-in ones are 40-150 KB)


@dataclass(frozen=True)
class Recorded:
    """One prompt: the target's greedy answer and the draft's greedy proposal at each of its
    positions (`draft[i]` follows prompt + answer[:i]; None: no draft model recorded), with
    the probability the draft gave it (`draft_p[i]`)."""

    question_id: str
    category: str
    prompt: tuple[int, ...]
    answer: tuple[int, ...]
    finish: str
    draft: tuple[int, ...] | None
    draft_p: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Recording:
    target: str
    draft: str | None
    source: str
    max_tokens: int
    eog: frozenset[int]
    items: tuple[Recorded, ...]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "target": self.target,
                "draft": self.draft, "source": self.source, "max_tokens": self.max_tokens,
                "eog": sorted(self.eog),
                "prompts": [{"question_id": r.question_id, "category": r.category,
                             "prompt": list(r.prompt), "answer": list(r.answer),
                             "finish": r.finish,
                             "draft": None if r.draft is None else list(r.draft),
                             "draft_p": None if r.draft_p is None else list(r.draft_p)}
                            for r in self.items]}

    def select(self, categories: Sequence[str] | None, limit: int | None) -> Recording:
        """The prompts of these categories (all: None), at most `limit` of each."""
        known = list(dict.fromkeys(r.category for r in self.items))
        unknown = [c for c in categories or () if c not in known]
        if unknown:
            raise UsageError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} "
                             f"{', '.join(unknown)}; this recording has: {', '.join(known)}")
        taken: dict[str, int] = {}
        kept = []
        for r in self.items:
            if categories and r.category not in categories:
                continue
            if limit is not None and taken.get(r.category, 0) >= limit:
                continue
            taken[r.category] = taken.get(r.category, 0) + 1
            kept.append(r)
        return Recording(self.target, self.draft, self.source, self.max_tokens, self.eog,
                         tuple(kept))


Listener = Callable[[Recorded], None]


def record(runtime: Runtime, prompts: Sequence[BenchPrompt], max_tokens: int, source: str,
           listener: Listener | None = None) -> Recording:
    """Answer every prompt plainly and greedily with the target and teacher-force the draft
    (when one is loaded) along each answer. Prompts that do not fit are left out."""
    items: list[Recorded] = []
    options = GenerationOptions(max_tokens=max_tokens, spec=Spec.OFF)
    for p in prompts:
        tokens = runtime.chat_tokens([{"role": "user", "content": p.text}])
        if len(tokens) + max_tokens > runtime.target.n_ctx:
            continue
        runtime.target.truncate(0)
        finished = drain(runtime.stream(tokens, options))
        if not isinstance(finished, Finished):
            raise RuntimeError(f"the engine ended {p.question_id} without a Finished event")
        answer = tuple(finished.tokens)
        draft = draft_p = None
        # A draft of another vocabulary drafts text (engine/textdraft.py): its proposals are
        # not one token per answer position, so it is not recorded (lookups still replay).
        if runtime.draft is not None and runtime.vocabs is None:
            forced = teacher_forced(runtime.draft, runtime.target.n_vocab, tokens, answer)
            draft = tuple(t for t, _ in forced)
            draft_p = tuple(round(c, 3) for _, c in forced)
        item = Recorded(p.question_id, p.category, tuple(tokens), answer, finished.reason,
                        draft, draft_p)
        items.append(item)
        if listener is not None:
            listener(item)
    info = runtime.info
    return Recording(Path(info.target_path).name,
                     Path(info.draft_path).name if info.draft_path else None, source,
                     max_tokens, frozenset(runtime.target.eog_tokens), tuple(items))


def teacher_forced(draft: LogitsModel, n_target: int, prompt: Sequence[int],
                   answer: Sequence[int]) -> list[tuple[int, float]]:
    """The draft's greedy next token after prompt + answer[:i], and the probability it gives
    it, for every i < len(answer).

    The same choice the engine's draft drafter makes (engine/drafters.py: cut the logits to
    the ids both models share, then greedy), computed for many positions per eval; batched
    and one-at-a-time evals may differ at near-ties, which docs/gpu.md measures.
    """
    draft.truncate(0)
    fill_cache(draft, prompt[:-1])
    forced = [prompt[-1], *answer[:-1]]
    sampling = SamplingOptions()
    out: list[tuple[int, float]] = []
    for lo in range(0, len(forced), ROWS_PER_EVAL):
        chunk = forced[lo: lo + ROWS_PER_EVAL]
        for row in draft.eval(chunk, list(range(len(chunk)))):
            x = shared_logits(row, n_target)
            out.append((greedy_token(x, (), sampling), top_probability(x)))
    draft.truncate(0)
    return out


def save(recording: Recording, path: Path) -> None:
    """Through fileio: atomic, private (it holds the prompts' tokens)."""
    fileio.atomic_write(path, json.dumps(recording.to_json(), separators=(",", ":")) + "\n")


def load(path: Path) -> Recording:
    """A recording file, checked: anything malformed is one usage error naming the file."""
    try:
        data = json.loads(fileread.read_text(path, FILE_LIMIT))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such recording (make one with specchat bench "
                         "--record FILE)") from None
    except fileio.FileIOError as exc:
        raise UsageError(f"{exc}; give a recording made by `specchat bench --record FILE`") \
            from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not a readable recording ({exc})") from None
    return parse(data, str(path))


def parse(data: object, where: str) -> Recording:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{where}: not a specchat acceptance recording")
    if data.get("version") != VERSION:
        raise UsageError(f"{where}: recording version {data.get('version')!r}; this specchat "
                         f"reads version {VERSION}")
    items = data.get("prompts")
    if not isinstance(items, list) or not items:
        raise UsageError(f"{where}: no prompts in the recording")
    max_tokens = data.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise UsageError(f"{where}: max_tokens must be a positive integer")
    draft_name = data.get("draft")
    eog = frozenset(_ids(data.get("eog"), f"{where}: eog", empty=True))
    return Recording(
        _text(data.get("target"), where, "target"),
        None if draft_name is None else _text(draft_name, where, "draft"),
        _text(data.get("source"), where, "source"), max_tokens, eog,
        tuple(_item(item, f"{where}: prompt {n + 1}", max_tokens, eog)
              for n, item in enumerate(items)))


def _item(item: object, where: str, max_tokens: int, eog: frozenset[int]) -> Recorded:
    if not isinstance(item, dict):
        raise UsageError(f"{where}: expected an object")
    prompt = _ids(item.get("prompt"), f"{where}: prompt")
    answer = _ids(item.get("answer"), f"{where}: answer")
    draft = item.get("draft")
    forced = None if draft is None else _ids(draft, f"{where}: draft")
    if forced is not None and len(forced) != len(answer):
        raise UsageError(f"{where}: draft must have one token per answer token")
    confidence = _probabilities(item.get("draft_p"), f"{where}: draft_p", forced)
    qid = item.get("question_id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool):
        raise UsageError(f"{where}: question_id must be a string or an integer")
    _check_end(answer, where, max_tokens, eog)
    return Recorded(str(qid), _text(item.get("category"), where, "category"), prompt, answer,
                    _text(item.get("finish"), where, "finish"), forced, confidence)


def _check_end(answer: tuple[int, ...], where: str, max_tokens: int,
               eog: frozenset[int]) -> None:
    """An answer ends where the engine would end it: at its first end-of-generation token,
    or after max_tokens tokens; else no replay can reproduce it."""
    if len(answer) > max_tokens:
        raise UsageError(f"{where}: an answer of {len(answer)} tokens, longer than the "
                         f"recording's max_tokens ({max_tokens})")
    early = next((i for i, t in enumerate(answer[:-1]) if t in eog), None)
    if early is not None:
        raise UsageError(f"{where}: answer token {early + 1} is an end-of-generation id (eog) "
                         "but the answer goes on; the recording's eog list disagrees with it")
    if answer[-1] not in eog and len(answer) != max_tokens:
        raise UsageError(f"{where}: an answer of {len(answer)} tokens that ends in no "
                         f"end-of-generation id must be max_tokens ({max_tokens}) long; the "
                         "recording's max_tokens disagrees with its answers")


def _probabilities(value: object, where: str,
                   draft: tuple[int, ...] | None) -> tuple[float, ...] | None:
    if value is None and draft is None:
        return None
    if draft is None or not isinstance(value, list) or len(value) != len(draft) or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p <= 1.0
            for p in value):
        raise UsageError(f"{where} must be a probability (0 to 1) per draft token")
    return tuple(float(p) for p in value)


def _ids(value: object, where: str, empty: bool = False) -> tuple[int, ...]:
    if not isinstance(value, list) or (not value and not empty) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < MAX_IDS
            for t in value):
        raise UsageError(f"{where} must be a list of token ids")
    return tuple(value)


def _text(value: object, where: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: {name} must be non-empty text")
    return value
