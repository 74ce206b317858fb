"""What a chat is: a system prompt and a list of turns, and how it becomes a prompt.

The whole conversation is re-rendered through the chat template every turn, so that the token
sequence of turn n+1 starts with the tokens of turn n; the engine's prefix reuse then
evaluates only what is new. When the conversation no longer fits, the oldest turns are left out of
the prompt (never out of the saved conversation) and the system prompt always stays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.chat.attach import Attachment, compose
from specchat.errors import UsageError

Message = dict[str, str]
Tokenize = Callable[[Sequence[Message]], list[int]]


@dataclass
class Turn:
    """One question and the answer it got (maybe cut short by Ctrl-C or a full context)."""

    user: str
    assistant: str
    interrupted: bool = False
    reason: str = ""  # the engine's finish reason; "" when interrupted
    stats: dict[str, Any] | None = None
    attachments: list[Attachment] = field(default_factory=list)  # files sent with `user`

    @property
    def message(self) -> str:
        """What the model was sent: the attached files, then the question."""
        return compose(self.attachments, self.user)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"user": self.user, "assistant": self.assistant}
        if self.interrupted:
            out["interrupted"] = True
        if self.reason:
            out["reason"] = self.reason
        if self.stats is not None:
            out["stats"] = self.stats
        if self.attachments:
            out["attachments"] = [a.to_dict() for a in self.attachments]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        return cls(user=str(data.get("user", "")), assistant=str(data.get("assistant", "")),
                   interrupted=bool(data.get("interrupted", False)),
                   reason=str(data.get("reason", "")), stats=data.get("stats"),
                   attachments=_attachments(data.get("attachments")))


def _attachments(raw: Any) -> list[Attachment]:
    items = [Attachment.from_dict(a) for a in raw] if isinstance(raw, list) else []
    return [a for a in items if a is not None]


@dataclass
class Fitted:
    """A prompt that fits: its tokens, and how many oldest turns had to be left out."""

    tokens: list[int]
    newly_dropped: int


@dataclass
class Conversation:
    """Messages in order; `start` is the first turn still sent to the model."""

    system: str = ""
    turns: list[Turn] = field(default_factory=list)
    start: int = 0

    def messages(self, pending_user: str | None = None, start: int | None = None
                 ) -> list[Message]:
        """The chat-template input: system prompt, kept turns, then the new question."""
        first = self.start if start is None else start
        out: list[Message] = []
        if self.system:
            out.append({"role": "system", "content": self.system})
        for turn in self.turns[first:]:
            out.append({"role": "user", "content": turn.message})
            out.append({"role": "assistant", "content": turn.assistant})
        if pending_user is not None:
            out.append({"role": "user", "content": pending_user})
        return out

    def fit(self, pending_user: str, tokenize: Tokenize, n_ctx: int, reserve: int) -> Fitted:
        """Tokens for the next prompt, leaving `reserve` positions for the answer.

        When the conversation is too long, drop oldest turns until the prompt takes at most half
        the context: dropping breaks the cached prefix, so dropping generously means the next
        several turns reuse the cache again instead of each re-evaluating everything.
        """
        tokens = tokenize(self.messages(pending_user))
        if len(tokens) + reserve <= n_ctx:
            return Fitted(tokens, 0)
        target = min(n_ctx // 2, n_ctx - reserve)
        before = self.start
        while self.start < len(self.turns):
            self.start += 1
            tokens = tokenize(self.messages(pending_user))
            if len(tokens) <= target:
                break
        if len(tokens) >= n_ctx:  # not even one position left for the answer
            self.start = before
            raise UsageError(f"this message needs {len(tokens)} tokens with the system prompt "
                             f"and the context holds {n_ctx}: shorten it or raise --ctx")
        return Fitted(tokens, self.start - before)

    def add(self, turn: Turn) -> None:
        self.turns.append(turn)

    def undo(self) -> Turn | None:
        """Remove and return the last turn (None when there is none)."""
        if not self.turns:
            return None
        turn = self.turns.pop()
        self.start = min(self.start, len(self.turns))
        return turn

    def clear(self) -> None:
        """Forget every turn; the system prompt stays, it is a setting of the session."""
        self.turns.clear()
        self.start = 0

    def last_answer(self) -> str | None:
        return self.turns[-1].assistant if self.turns else None

    def to_records(self) -> list[dict[str, Any]]:
        """The state as chat log records, for /save and for seeding a new file after /load."""
        records: list[dict[str, Any]] = []
        if self.system:
            records.append({"type": "system", "text": self.system})
        records.extend({"type": "turn", **t.to_dict()} for t in self.turns)
        return records

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]]) -> Conversation:
        """Replay an append-only log: turns, undo, clear and system-prompt changes."""
        conv = cls()
        for record in records:
            kind = record.get("type")
            if kind == "turn":
                conv.add(Turn.from_dict(record))
            elif kind == "undo":
                conv.undo()
            elif kind == "clear":
                conv.clear()
            elif kind == "system":
                conv.system = str(record.get("text", ""))
        return conv
