"""Every model file on this machine, wherever a tool put it: what `specchat models --local`
lists and where a draft is looked for. The other tools' folders (local.py), the Hugging Face
cache and specchat's downloaded presets; a file reached two ways counts once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from specchat.errors import SpecchatError
from specchat.llm.gguf import gguf_parts
from specchat.models.hfcache import cached_gguf_files
from specchat.models.local import local_models
from specchat.models.localfiles import LocalModel
from specchat.models.presets import load_presets
from specchat.models.resolve import preset_file, preset_present


def all_models() -> tuple[list[LocalModel], list[str]]:
    """Every usable model, and one line for each entry of another tool's folder refused."""
    found, refused = local_models()
    models: list[LocalModel] = []
    seen: set[str] = set()
    for model in [*_preset_models(), *_hub_models(), *found]:
        real = os.path.realpath(model.path)
        if real not in seen:
            seen.add(real)
            models.append(model)
    return models, refused


def _hub_models() -> Iterator[LocalModel]:
    for cached in cached_gguf_files():
        # The snapshot's name, not the blob's: llama.cpp finds split parts by name.
        yield LocalModel("hf", f"{cached.repo}:{cached.file.rsplit('/', 1)[-1]}", cached.path,
                         cached.size)


def _preset_models() -> Iterator[LocalModel]:
    try:
        presets = load_presets()
    except SpecchatError:
        return
    for preset in presets.values():
        try:
            if preset_present(preset):
                path = preset_file(preset)
                size = sum(p.stat().st_size for p in gguf_parts(path))
                yield LocalModel("specchat", preset.name, path, size)
        except (OSError, SpecchatError):
            continue
