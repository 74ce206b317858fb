"""Model presets (models.toml), the download cache, and turning a name or path into a file.

The rest of specchat needs only what is exported here.
"""

from __future__ import annotations

from specchat.models.download import pull, pull_preset
from specchat.models.presets import (
    DEFAULT_TARGET,
    HubSource,
    MirrorSource,
    Preset,
    Source,
    WheelPart,
    find_preset,
    load_presets,
    user_config_path,
)
from specchat.models.resolve import default_draft_for, resolve_model
from specchat.models.store import cache_dir, check_gguf, is_present, model_path

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
    "find_preset",
    "is_present",
    "load_presets",
    "model_path",
    "pull",
    "pull_preset",
    "resolve_model",
    "user_config_path",
]
