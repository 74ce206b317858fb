"""The llama.cpp model layer.

backend/ is the only package in specchat that imports llama_cpp; template.py, vocab.py and
text.py are pure so they can be used and tested without it. Importing this package does not
load llama.cpp: the backend names below are resolved on first use.
"""

from __future__ import annotations

from typing import Any

from specchat.llm.template import ChatTemplate, chat_tokens
from specchat.llm.text import StreamDecoder
from specchat.llm.vocab import VocabInfo, check_compatible, compatibility_problems

_BACKEND_NAMES = frozenset({
    "LlamaModel", "load_model", "gpu_devices", "gpu_offload_supported", "read_model_shape",
    "read_vocab_info", "requantize", "system_info", "plain_chat_llama",
})

__all__ = [
    "ChatTemplate", "LlamaModel", "StreamDecoder", "VocabInfo", "chat_tokens", "check_compatible",
    "compatibility_problems", "gpu_devices", "gpu_offload_supported", "load_model",
    "plain_chat_llama", "read_model_shape", "read_vocab_info", "requantize",
    "system_info",
]


def __getattr__(name: str) -> Any:
    if name in _BACKEND_NAMES:
        from specchat.llm import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'specchat.llm' has no attribute {name!r}")
