"""Where specchat keeps things on the user's machine, decided in one place.

Every location follows one rule: an explicit variable for that thing when there is one, else
$SPECCHAT_HOME, else the XDG base directory of its kind (config, cache, state) + "specchat".
"""

from __future__ import annotations

import os
import sys
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


# --- every place specchat keeps something ---------------------------------------------------
def config_file() -> Path:
    """$SPECCHAT_CONFIG, else $SPECCHAT_HOME/config.toml, else $XDG_CONFIG_HOME/specchat."""
    return user_path("config", "config.toml", override="SPECCHAT_CONFIG")


def user_models_file() -> Path:
    """The user's own presets (models.toml) beside the config file."""
    return user_path("config", "models.toml")


def model_cache_dir() -> Path:
    """$SPECCHAT_CACHE, else $SPECCHAT_HOME/models, else $XDG_CACHE_HOME/specchat/models."""
    return user_path("cache", "models", override="SPECCHAT_CACHE")


def calibration_file() -> Path:
    """What this machine costs per model (next to the model cache: measured per file)."""
    return model_cache_dir().parent / "calibration.json"


def hub_records_file() -> Path:
    """Which file each Hugging Face reference resolved to (next to the model cache)."""
    return model_cache_dir().parent / "hub-refs.json"


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps models, by its own rules (read at call time, not import),
    so that every hub tool shares one cache."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        home = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                   / "huggingface")
    return Path(home).expanduser() / "hub"


def local_headers_file() -> Path:
    """What specchat read from the headers of models other tools keep (next to the cache)."""
    return model_cache_dir().parent / "local-headers.json"


# --- where other tools keep models (read in place, never written) ---------------------------
def ollama_model_dirs() -> list[Path]:
    """$OLLAMA_MODELS, else the user's ~/.ollama/models and the system service's folder."""
    explicit = os.environ.get("OLLAMA_MODELS")
    if explicit:
        return [Path(explicit).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def lmstudio_model_dirs() -> list[Path]:
    """LM Studio's models folder, and the one its older versions used."""
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


def llama_cache_dir() -> Path:
    """Where llama.cpp's `-hf` downloads go: $LLAMA_CACHE, else its platform default (as its
    common library decides: the XDG cache on Linux, ~/Library/Caches on macOS, LOCALAPPDATA on
    Windows, each + llama.cpp)."""
    explicit = os.environ.get("LLAMA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "llama.cpp"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "llama.cpp"


def prompt_cache_dir() -> Path:
    """$SPECCHAT_HOME/prompt-cache, else $XDG_CACHE_HOME/specchat/prompt-cache."""
    return user_path("cache", "prompt-cache")


def cpu_share_dir() -> Path:
    """The lock files by which specchat processes count each other (backend/cpushare.py)."""
    return user_path("cache", "cpu")


def state_dir() -> Path:
    """$SPECCHAT_HOME/state, else $XDG_STATE_HOME/specchat, else ~/.local/state/specchat."""
    return user_path("state", "", home_name="state")


def conversations_dir() -> Path:
    return state_dir() / "conversations"


def draft_store_dir() -> Path:
    """Earlier prompts and answers `auto` drafts from (they hold the user's words, so they
    live with the conversations): $SPECCHAT_DRAFT_STORE_DIR, else <state>/drafts."""
    return user_path("state", "drafts", home_name="state/drafts",
                     override="SPECCHAT_DRAFT_STORE_DIR")


def serve_store_dir() -> Path:
    """`specchat serve`'s drafting stores, one per client, apart from the owner's own
    (backend/clients.py): $SPECCHAT_SERVE_STORE_DIR, else <state>/serve-drafts."""
    return user_path("state", "serve-drafts", home_name="state/serve-drafts",
                     override="SPECCHAT_SERVE_STORE_DIR")


def input_lines_file() -> Path:
    """Where the chat keeps its input lines (Up-arrow, Ctrl-R): a file named `history`
    since before that word meant only saved conversations; users' files keep their name."""
    return state_dir() / "history"


def logs_dir() -> Path:
    """--verbose logs of the chat."""
    return state_dir() / "logs"
