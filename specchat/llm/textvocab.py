"""A loaded model's vocabulary as text: what engine/textdraft.py needs to draft across two
vocabularies (engine.textdraft.TextVocab on llama.cpp)."""

from __future__ import annotations

from specchat.llm.lib import is_control_token
from specchat.llm.model import LlamaModel


class LlamaTextVocab:
    """One model's vocabulary as text. Text is always tokenized as plain text: special-token
    spellings in it stay text, so a draft's words never become a control token."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._controls: dict[int, bool] = {}
        self._named: dict[bytes, int | None] = {}

    @property
    def bos(self) -> int | None:
        return self.model.bos_token if self.model.add_bos else None

    def piece(self, token: int) -> bytes:
        return self.model.token_bytes(token)

    def is_control(self, token: int) -> bool:
        known = self._controls.get(token)
        if known is None:
            known = self._controls[token] = token in self.model.eog_tokens or \
                is_control_token(self.model.vocab_handle, token)
        return known

    def control(self, text: bytes) -> int | None:
        if text not in self._named:
            ids = self.model.tokenize(text.decode("utf-8", errors="replace"),
                                      parse_special=True)
            self._named[text] = ids[0] if len(ids) == 1 and self.is_control(ids[0]) and \
                self.piece(ids[0]) == text else None
        return self._named[text]

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenize(text, add_special=False, parse_special=False)
