"""Model presets (models.toml), the caches, and turning a name, path or hub reference into a
file. Loading and asking need only what is exported here; the commands that list, pair and
inspect models (models, models --local, --drafts-for) import the modules they show.
"""

from __future__ import annotations

from specchat.models.cache import cache_dir, check_gguf
from specchat.models.presets import (
    DEFAULT_TARGET,
    HubSource,
    MirrorSource,
    Preset,
    Source,
    WheelPart,
    find_preset,
    load_presets,
)
from specchat.models.resolve import (
    default_draft_for,
    fetch_preset,
    preset_file,
    preset_present,
    pull,
    resolve_model,
)

__all__ = [
    "DEFAULT_TARGET",
    "HubSource",
    "MirrorSource",
    "Preset",
    "Source",
    "WheelPart",
    "cache_dir",
    "check_gguf",
    "default_draft_for",
    "fetch_preset",
    "find_preset",
    "load_presets",
    "preset_file",
    "preset_present",
    "pull",
    "resolve_model",
]
