"""Where specchat keeps things on the user's machine, decided in one place.

Every location follows one rule: an explicit variable for that thing when there is one, else
$SPECCHAT_HOME, else the XDG base directory of its kind (config, cache, state) + "specchat".
"""

from __future__ import annotations

import os
from pathlib import Path

_XDG: dict[str, tuple[str, tuple[str, ...]]] = {
    "config": ("XDG_CONFIG_HOME", (".config",)),
    "cache": ("XDG_CACHE_HOME", (".cache",)),
    "state": ("XDG_STATE_HOME", (".local", "state")),
}


def user_path(kind: str, name: str, *, home_name: str | None = None,
              override: str | None = None) -> Path:
    """$override, else $SPECCHAT_HOME/home_name (default: name), else
    $XDG_<KIND>_HOME/specchat/name; an empty variable counts as unset."""
    explicit = os.environ.get(override) if override else None
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("SPECCHAT_HOME")
    if home:
        return Path(home).expanduser() / (home_name or name)
    var, default = _XDG[kind]
    xdg = os.environ.get(var)
    base = Path(xdg).expanduser() if xdg else Path.home().joinpath(*default)
    return base / "specchat" / name if name else base / "specchat"
