"""The config file and its profiles, and resolving every option to a value and a source.

    # $XDG_CONFIG_HOME/specchat/config.toml (or $SPECCHAT_CONFIG)
    model = "qwen2.5-coder-1.5b"
    temperature = 0.2

    [profile.code]
    system = "You are a careful senior engineer."
    max_tokens = 2048

Keys are option names (`max_tokens` or `max-tokens`). Precedence, highest first:
flag > environment variable > profile > config file > built-in default.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat import fileio, fileread
from specchat.errors import UsageError
from specchat.paths import config_file
from specchat.settings.schema import ALIASES, BY_NAME, OptionError, env_values

FLAG, ENV, FILE, DEFAULT = "flag", "env", "file", "default"


@dataclass
class ConfigFile:
    """The parsed, validated file: base values and named profiles."""

    path: Path
    base: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_config(path: Path | None = None) -> ConfigFile:
    """Read and check the file; a missing file is an empty config.

    Any problem is one usage error naming the file, the key and what is allowed.
    """
    path = path or config_file()
    try:
        raw = fileread.read_limited(path, fileread.SETTINGS_LIMIT)
    except FileNotFoundError:
        return ConfigFile(path)
    except fileio.FileIOError as exc:
        raise UsageError(f"{exc} (the config file)") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    profiles_raw = data.pop("profile", {})
    if not isinstance(profiles_raw, dict) or not all(
            isinstance(v, dict) for v in profiles_raw.values()):
        raise UsageError(f"{path}: profiles are tables: [profile.NAME] with option keys")
    config = ConfigFile(path, _checked(data, path, ""))
    for name, values in profiles_raw.items():
        config.profiles[name] = _checked(values, path, f"[profile.{name}] ")
    return config


def _checked(values: Mapping[str, Any], path: Path, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = ALIASES.get(key.lower(), key.lower().replace("-", "_"))
        opt = BY_NAME.get(name)
        if opt is None:
            near = difflib.get_close_matches(name, list(BY_NAME), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise UsageError(f"{path}: {where}unknown key {key!r}{hint}; keys are option names "
                             f"(`specchat config --help` lists them) or [profile.NAME] tables")
        try:
            out[name] = opt.accept(value)
        except OptionError as exc:
            raise UsageError(f"{path}: {where}{key}: {exc}") from None
    return out


@dataclass
class Settings:
    """Every option a command takes, resolved, with where each value came from."""

    values: dict[str, Any]
    sources: dict[str, str]
    profile: str | None = None
    path: Path | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)


def resolve(names: Iterable[str], flags: Mapping[str, Any], *, profile: str | None = None,
            environ: Mapping[str, str] | None = None,
            defaults: Mapping[str, Any] | None = None,
            flag_only: Iterable[str] = ()) -> Settings:
    """Resolve `names`: `flags` holds the options given on the command line (None: not given).

    `defaults` replaces built-in defaults for one command; options in `flag_only` ignore the
    environment and the config file (bench must not turn sampled because chat is).
    """
    names = tuple(names)
    environ = os.environ if environ is None else environ
    profile = profile or environ.get("SPECCHAT_PROFILE") or None
    config = read_config()
    if profile is not None and profile not in config.profiles:
        known = ", ".join(sorted(config.profiles)) or "none defined"
        raise UsageError(f"no profile {profile!r} in {config.path} (profiles: {known})")
    fixed = set(flag_only)
    layered = [n for n in names if n not in fixed]
    layers: list[tuple[str, Mapping[str, Any]]] = [
        (FLAG, {k: v for k, v in flags.items() if v is not None}),
        (ENV, env_values(layered, environ)),
        (f"profile {profile}", config.profiles.get(profile, {}) if profile else {}),
        (FILE, config.base),
    ]
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in names:
        for source, layer in layers:
            if name in layer and (source == FLAG or name not in fixed):
                values[name], sources[name] = layer[name], source
                break
        else:
            base = defaults or {}
            values[name] = base[name] if name in base else BY_NAME[name].default
            sources[name] = DEFAULT
    return Settings(values, sources, profile, config.path)


def save_settings(values: Mapping[str, Any], path: Path | None = None) -> Path:
    """Write `values` into the config file's base table, keeping its comments and profiles.
    Read, changed and written with its directory locked: two saves at the same moment (two
    chats' /save-settings) each change the file as the other left it, never an older copy."""
    path = path or config_file()
    with fileio.locked_directory(path.parent):  # FileIOError, as a failed write raises
        return _save_settings(values, path)


def _save_settings(values: Mapping[str, Any], path: Path) -> Path:
    import tomlkit

    try:
        raw = fileread.read_limited(path, fileread.SETTINGS_LIMIT)
    except FileNotFoundError:
        raw = b""
    except fileio.FileIOError as exc:
        raise UsageError(str(exc)) from None
    try:
        document = tomlkit.parse(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomlkit.exceptions.TOMLKitError) as exc:
        raise UsageError(f"{path}: cannot update it: {exc}") from None
    for name, value in values.items():
        if value is None:
            document.pop(name, None)  # "none" is the default for every optional option
        else:
            document[name] = value
    fileio.atomic_write(path, tomlkit.dumps(document))  # 0600: it may hold a system prompt
    return path
