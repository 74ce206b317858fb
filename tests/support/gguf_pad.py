"""Write a copy of a GGUF model whose vocabulary is padded with unused ids at the end.

This is how a family's large models differ from its small ones (Qwen2.5 7B+ store 152064
ids, 0.5B-3B 151936): the extra ids are named [PADn], typed UNUSED, and their embedding (and
output, when the model has its own output matrix) rows are zero. Every other key, tensor and
byte is copied unchanged. Test-only: it needs the `gguf` package (the `test` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# Tensors with one row per token id, padded with zero rows.
_PER_TOKEN_TENSORS = ("token_embd.weight", "output.weight")
_UNUSED = 5  # enum llama_token_type: LLAMA_TOKEN_TYPE_UNUSED


def write_padded_copy(src: Path, dst: Path, n_pad: int) -> Path:
    """dst: `src` with n_pad unused tokens appended to its vocabulary."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch_field = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    tokens = reader.get_field(gguf.Keys.Tokenizer.LIST)
    assert arch_field is not None and tokens is not None, f"{src} has no architecture or tokens"
    arch = str(arch_field.contents())
    n_old = len(tokens.data)
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    alignment = reader.get_field(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    extra: dict[str, list[Any]] = {
        gguf.Keys.Tokenizer.LIST: [f"[PAD{n_old + i}]" for i in range(n_pad)],
        gguf.Keys.Tokenizer.TOKEN_TYPE: [_UNUSED] * n_pad,
        gguf.Keys.Tokenizer.SCORES: [0.0] * n_pad,
    }
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name in extra:
            value = [*value, *extra[field.name]]
        elif field.name == f"{arch}.vocab_size":
            value = n_old + n_pad
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    tensors = [(t, _padded(t, n_old, n_pad)) for t in reader.tensors]
    for tensor, data in tensors:
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes,
                               tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data in tensors:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
    return dst


def _padded(tensor: Any, n_old: int, n_pad: int) -> np.ndarray:
    """The tensor's stored rows, plus n_pad rows of zero bytes when it has one row per token.

    Zero bytes are zero in every GGML type: quantized blocks with zero scales included."""
    data = tensor.data
    if tensor.name not in _PER_TOKEN_TENSORS:
        return data
    assert data.shape[0] == n_old, f"{tensor.name} has {data.shape[0]} rows, not {n_old}"
    return np.concatenate([data, np.zeros((n_pad, *data.shape[1:]), dtype=data.dtype)])
