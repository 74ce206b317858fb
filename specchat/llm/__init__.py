"""The llama.cpp model layer: the only package in specchat that imports llama_cpp.

lib.py, model.py and files.py hold the llama_cpp calls; every other module here is pure
(template, vocab, gpufit, and the small helpers those three use), so it can be used and
tested without llama.cpp. Importing this package does not load llama.cpp: the names below
that need it are resolved on first use.
"""

from __future__ import annotations

from typing import Any

from specchat.llm.template import ChatTemplate, chat_tokens
from specchat.llm.vocab import VocabInfo, check_compatible, compatibility_problems

_LIB_NAMES = {
    "LlamaModel": "model", "load_model": "model",
    "gpu_devices": "files", "read_model_shape": "files", "read_vocab_info": "files",
    "read_summary": "files",
    "requantize": "files", "system_info": "files", "plain_chat_llama": "files",
    "gpu_offload_supported": "lib", "runs_on_cpu": "lib",
}

__all__ = [
    "ChatTemplate", "LlamaModel", "VocabInfo", "chat_tokens", "check_compatible",
    "compatibility_problems", "gpu_devices", "gpu_offload_supported", "load_model",
    "plain_chat_llama", "read_model_shape", "read_summary", "read_vocab_info", "requantize",
    "runs_on_cpu", "system_info",
]


def __getattr__(name: str) -> Any:
    module = _LIB_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'specchat.llm' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"specchat.llm.{module}"), name)
