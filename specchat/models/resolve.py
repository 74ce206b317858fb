"""Turn what the user typed (a preset name, a path or a hub reference) into a GGUF file on disk.

Preset names win over same-named files in the working directory; `./name` forces a path and
`hf.co/owner/name` forces a Hugging Face reference (the full rule: specchat.models.hfref).
"""

from __future__ import annotations

import os
from pathlib import Path

from specchat.errors import ModelError, UsageError
from specchat.models import store
from specchat.models.download import pull_preset
from specchat.models.hfref import HfRef, has_hub_prefix, parse_ref, require_ref
from specchat.models.presets import Preset, load_presets, unknown_preset_message


def looks_like_path(spec: str) -> bool:
    """A separator, a ~, or a .gguf suffix: the user meant a file, not a preset name."""
    seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return (any(s in spec for s in seps) or spec.startswith("~")
            or spec.lower().endswith(".gguf") or Path(spec).exists())


def resolve_model(spec: str, *, pull: bool = True, quiet: bool = False) -> Path:
    """The GGUF file for `spec`: a cached preset (pulled first if missing) or a checked path."""
    presets = load_presets()
    ref = hub_ref_or_none(spec, presets)
    if ref is not None:
        from specchat.models.hffetch import resolve_ref

        return store.check_gguf(resolve_ref(ref, pull=pull, quiet=quiet))
    preset = _preset_or_none(spec, presets)
    if preset is None:
        return store.check_gguf(Path(spec).expanduser())
    if store.is_present(preset):
        return store.model_path(preset)
    if not pull:
        path = store.model_path(preset)
        if path.is_file():
            raise ModelError(f"model file {path} is incomplete ({path.stat().st_size} bytes, "
                             f"expected {store.expected_size(preset)}): run `specchat pull "
                             f"{spec}` to fetch it again")
        raise ModelError(f"model '{spec}' is not downloaded yet; run `specchat pull {spec}`")
    return pull_preset(preset, quiet=quiet)


def hub_ref_or_none(spec: str, presets: dict[str, Preset] | None = None) -> HfRef | None:
    """The hub reference `spec` means, or None for a preset name or a path."""
    presets = load_presets() if presets is None else presets
    if spec in presets:
        return None
    if has_hub_prefix(spec):
        return require_ref(spec)
    if spec.startswith(("./", "../", "/", "~")) or spec.lower().endswith(".gguf") \
            or Path(spec).exists():
        return None
    return parse_ref(spec)


def default_draft_for(spec: str) -> str | None:
    """The default draft preset of `spec`; None for paths and presets that have none."""
    presets = load_presets()
    if hub_ref_or_none(spec, presets) is not None:
        return None
    preset = _preset_or_none(spec, presets)
    return None if preset is None else preset.draft


def _preset_or_none(spec: str, presets: dict[str, Preset]) -> Preset | None:
    """The preset named `spec`, None when `spec` is a path, UsageError when it is neither."""
    if not spec.strip():
        raise UsageError("empty model name; give a preset name (see `specchat models`) or a path")
    if spec in presets:
        return presets[spec]
    if looks_like_path(spec):
        return None
    raise UsageError(unknown_preset_message(spec, presets, paths_ok=True))
