"""Turn what the user typed (a preset name, a path or a hub reference) into a GGUF file on disk.

How an argument is read: a preset name is a preset; `ollama:`, `lmstudio:` and `llamacpp:`
name a model another tool keeps (models/local.py); `hf.co/...`, `huggingface.co/...` and
`https://huggingface.co/...` are always references; anything that exists on disk or starts
with `./`, `../`, `/` or `~` is a path; `owner/name[:QUANT]` and `owner/name:FILE.gguf` are
references; anything else ending in `.gguf` is a path. So `./owner/name` forces a path and
`hf.co/owner/name` forces a reference.

This is the only module that knows a preset may live in the Hugging Face cache (`hf =` in
models.toml): everything else asks here where a preset's file is and whether it is present.
"""

from __future__ import annotations

from pathlib import Path

from specchat.errors import ModelError, UsageError
from specchat.models import cache
from specchat.models.download import pull_preset
from specchat.models.hfcache import repo_dir, resolve_cached
from specchat.models.hffetch import resolve_ref
from specchat.models.hfref import HfRef, has_hub_prefix, parse_ref, require_ref
from specchat.models.local import is_local_name, resolve_local
from specchat.models.presets import (
    Preset,
    find_preset,
    load_presets,
    unknown_preset_message,
)


def looks_like_path(name: str) -> bool:
    """The user meant a file: it exists, or it is written like a path (a ./, ../, / or ~
    start, or a .gguf suffix that is not `owner/name:FILE.gguf`, a file of a hub repo)."""
    if name.startswith(("./", "../", "/", "~")) or Path(name).expanduser().exists():
        return True
    if not name.lower().endswith(".gguf"):
        return False
    ref = parse_ref(name)  # `models/x.gguf` is a path; `owner/name:x.gguf` a file on the hub
    return ref is None or ref.quant is None


def resolve_model(name: str, *, pull: bool = True, quiet: bool = False) -> Path:
    """The GGUF file for `name`: a cached preset (pulled first if missing), a hub reference
    (downloaded first if missing) or a checked path."""
    presets = load_presets()
    if name not in presets and is_local_name(name):  # ollama:, lmstudio:, llamacpp:
        return resolve_local(name)
    ref = hub_ref_or_none(name, presets)
    if ref is not None:
        return cache.check_gguf(resolve_ref(ref, pull=pull, quiet=quiet))
    preset = _preset_or_none(name, presets)
    if preset is None:
        return cache.check_gguf(Path(name).expanduser())
    if preset_present(preset):
        return preset_file(preset)
    if not pull:
        path = cache.model_path(preset)
        if preset.hf is None and path.is_file():
            raise ModelError(f"model file {path} is incomplete ({path.stat().st_size} bytes, "
                             f"expected {cache.expected_size(preset)}): run `specchat pull "
                             f"{name}` to fetch it again")
        raise ModelError(f"model '{name}' is not downloaded yet; run `specchat pull {name}`")
    return fetch_preset(preset, quiet=quiet)


def hub_ref_or_none(name: str, presets: dict[str, Preset] | None = None) -> HfRef | None:
    """The hub reference `name` means, or None for a preset name or a path."""
    presets = load_presets() if presets is None else presets
    if name in presets or is_local_name(name):
        return None
    if has_hub_prefix(name):
        return require_ref(name)
    if looks_like_path(name):
        return None
    return parse_ref(name)


def default_draft_for(name: str) -> str | None:
    """The default draft preset of `name`; None for paths and presets that have none."""
    presets = load_presets()
    if name not in presets and is_local_name(name):
        return None  # another tool's model: no preset names its draft
    if hub_ref_or_none(name, presets) is not None:
        return None
    preset = _preset_or_none(name, presets)
    return None if preset is None else preset.draft


# --- presets, wherever their files live ------------------------------------------------------
def preset_file(preset: Preset) -> Path:
    """Where the preset's file is once downloaded (whether or not it is there yet)."""
    if preset.hf is None:
        return cache.model_path(preset)
    ref = require_ref(preset.hf)
    return resolve_cached(ref) or repo_dir(ref.repo) / preset.filename


def preset_present(preset: Preset) -> bool:
    """Whether the preset's file is complete on disk."""
    if preset.hf is None:
        return cache.is_present(preset)
    return resolve_cached(require_ref(preset.hf)) is not None


def fetch_preset(preset: Preset, *, quiet: bool = False, force: bool = False) -> Path:
    """Download the preset unless it is there (force: again): into the HF cache the way
    `-m owner/name` is for an `hf =` preset, else from its sources into specchat's cache."""
    if preset.hf is not None:
        return resolve_ref(require_ref(preset.hf), quiet=quiet, force=force)
    return pull_preset(preset, quiet=quiet, force=force)


def pull(name: str, *, quiet: bool = False, force: bool = False) -> Path:
    """Download the preset `name` unless already there; returns the file's path."""
    return fetch_preset(find_preset(name), quiet=quiet, force=force)


def _preset_or_none(name: str, presets: dict[str, Preset]) -> Preset | None:
    """The preset called `name`, None when `name` is a path, UsageError when it is neither."""
    if not name.strip():
        raise UsageError("empty model name; give a preset name (see `specchat models`) or a path")
    if name in presets:
        return presets[name]
    if looks_like_path(name) or "/" in name:
        return None
    raise UsageError(unknown_preset_message(name, presets, paths_ok=True))
