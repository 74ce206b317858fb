"""The only place in specchat that imports llama_cpp: loading GGUF models with their KV caches
(model.py), reading files and the machine without weights (files.py), and the library's own
log and abort hooks (lib.py)."""

from specchat.llm.backend.files import (
    gpu_devices,
    plain_chat_llama,
    read_model_shape,
    read_vocab_info,
    requantize,
    system_info,
)
from specchat.llm.backend.lib import ABORTABLE_BATCH, gpu_offload_supported, llama_cpp
from specchat.llm.backend.model import LlamaModel, load_model

__all__ = ["ABORTABLE_BATCH", "LlamaModel", "gpu_devices", "gpu_offload_supported", "llama_cpp",
           "load_model", "plain_chat_llama", "read_model_shape", "read_vocab_info", "requantize",
           "system_info"]
