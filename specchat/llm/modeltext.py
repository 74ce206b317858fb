"""The text side of a loaded model: its tokenizer, token pieces and the facts its GGUF file
states. A mixin of llm/model.LlamaModel, kept apart so the cache and batch code reads alone."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import llama_cpp

from specchat.llm.cbuf import read_negative_size, read_tokens, token_or_none
from specchat.llm.lib import eog_tokens, model_vocab_info, read_metadata
from specchat.llm.vocab import VOCAB_TYPES, VocabInfo

WPM = next(k for k, v in VOCAB_TYPES.items() if v == "wpm")
# fewest_tokens() scans the vocabulary only for a text of at least this many bytes per
# context position: real text is 3-5 bytes a token, so such a text is tokenized at length.
SCAN_FROM = 32


class ModelText:
    """Tokenizing and model facts over `_model` and `_vocab`, which LlamaModel sets."""

    path: Path
    _model: Any
    _vocab: Any
    _n_vocab: int
    _ctx_limit: int
    _pieces: dict[int, bytes]
    _longest: int | None  # the most bytes one token stands for (fewest_tokens)
    _eog: frozenset[int] | None
    _metadata: dict[str, str] | None

    def _check_open(self, settle: bool = True) -> None:
        raise NotImplementedError

    @property
    def eog_tokens(self) -> frozenset[int]:
        if self._eog is None:
            self._eog = eog_tokens(self._vocab)
        return self._eog

    def know_eog_tokens(self, eog: frozenset[int]) -> None:
        """Take the end-of-generation ids found for this file before (models/headers.py),
        instead of asking llama.cpp about every id again."""
        self._eog = eog

    def token_bytes(self, token: int) -> bytes:
        """Raw bytes of a token's piece; special tokens render as their text."""
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = read_negative_size(
                lambda buf, size: llama_cpp.llama_token_to_piece(self._vocab, token, buf, size,
                                                                 0, True), 32)
        return piece

    # --- text ------------------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = False,
                 parse_special: bool = True) -> list[int]:
        """Text to token ids; add_special adds BOS/EOS as the model asks, parse_special turns
        special-token text like <|im_start|> into those tokens."""
        data = text.encode("utf-8")
        return read_tokens(
            lambda arr, size: llama_cpp.llama_tokenize(self._vocab, data, len(data), arr, size,
                                                       add_special, parse_special),
            len(data) + 8)

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on len(tokenize(text)), found in time linear in its length without
        tokenizing it: the text's bytes over twice the longest token's (twice: a tokenizer
        may normalize text to fewer bytes). 0 for WPM vocabularies (one [UNK] token can
        stand for a whole word), and for texts under SCAN_FROM bytes per context position:
        tokenizing those costs less than the one scan of the vocabulary the bound needs."""
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size < SCAN_FROM * self._ctx_limit or \
                int(llama_cpp.llama_vocab_type(self._vocab)) == WPM:
            return 0
        if self._longest is None:  # once per model: 0.4-1 s for 150,000-260,000 tokens
            buf = ctypes.create_string_buffer(256)
            pieces = (llama_cpp.llama_token_to_piece(self._vocab, t, buf, 256, 0, True)
                      for t in range(self._n_vocab))
            self._longest = max(abs(n) for n in pieces)  # -n: it needs n bytes
        return size // (2 * max(self._longest, 1))

    def token_text(self, token: int) -> str:
        """The token's text as stored in the vocabulary (e.g. '<|im_end|>', 'Ġthe')."""
        return (llama_cpp.llama_vocab_get_text(self._vocab, token) or b"").decode(
            "utf-8", errors="replace")

    # --- model facts -----------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, str]:
        """GGUF key/value metadata (scalars as strings; arrays are not exposed by llama.cpp)."""
        if self._metadata is None:
            self._metadata = read_metadata(self._model)
        return self._metadata

    @property
    def architecture(self) -> str:
        return self.metadata.get("general.architecture", "unknown")

    @property
    def chat_template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template") or None

    @property
    def bos_token(self) -> int | None:
        return token_or_none(llama_cpp.llama_vocab_bos(self._vocab))

    @property
    def eos_token(self) -> int | None:
        return token_or_none(llama_cpp.llama_vocab_eos(self._vocab))

    @property
    def add_bos(self) -> bool:
        """Whether the model expects a BOS token at the start of a prompt."""
        return bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

    @property
    def vocab_handle(self) -> Any:
        """llama.cpp's vocabulary object (llm/grammar.py builds llguidance's tokenizer on it)."""
        self._check_open()
        return self._vocab

    @property
    def is_recurrent(self) -> bool:
        """Recurrent or hybrid: its state cannot drop a tail, so it cannot speculate."""
        hybrid = getattr(llama_cpp, "llama_model_is_hybrid", None)
        return bool(llama_cpp.llama_model_is_recurrent(self._model)) or bool(
            hybrid is not None and hybrid(self._model))

    def vocab_info(self) -> VocabInfo:
        """What vocab.check_compatible compares (reads every token's text and kind: ~0.2 s)."""
        return model_vocab_info(self._model, self.path.name, self.metadata, self.eog_tokens)
