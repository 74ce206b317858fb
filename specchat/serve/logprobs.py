"""The target's log-probabilities in OpenAI's two shapes: chat's `logprobs.content` (one
entry per token with its text, bytes and top alternatives) and the legacy completions'
`logprobs` (parallel lists). The numbers come from the engine (engine/logprobs.py)."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from typing import Any

from specchat.engine.logprobs import TokenLogprob

FLOOR = -9999.0  # JSON has no -inf; a token the model all but ruled out reads as this


class LogprobTexts:
    """Each token's text is the characters that became complete with it, so the texts of an
    answer's tokens join to its text even where a character spans tokens."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self.token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.offset = 0  # characters so far (the legacy text_offset)

    def chat(self, items: Sequence[TokenLogprob]) -> dict[str, Any]:
        return {"content": [self._entry(item) for item in items]}

    def legacy(self, items: Sequence[TokenLogprob]) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                               "text_offset": []}
        for item in items:
            text = self._text(item.token)
            out["text_offset"].append(self.offset - len(text))
            out["tokens"].append(text)
            out["token_logprobs"].append(_finite(item.logprob))
            out["top_logprobs"].append({self._alone(t): _finite(lp) for t, lp in item.top})
        return out

    def _entry(self, item: TokenLogprob) -> dict[str, Any]:
        raw = self.token_bytes(item.token)
        return {"token": self._text(item.token), "logprob": _finite(item.logprob),
                "bytes": list(raw),
                "top_logprobs": [{"token": self._alone(t), "logprob": _finite(lp),
                                  "bytes": list(self.token_bytes(t))} for t, lp in item.top]}

    def _text(self, token: int) -> str:
        text = self._decoder.decode(self.token_bytes(token))
        self.offset += len(text)
        return text

    def _alone(self, token: int) -> str:
        return self.token_bytes(token).decode("utf-8", errors="replace")


def _finite(value: float) -> float:
    return max(value, FLOOR)
