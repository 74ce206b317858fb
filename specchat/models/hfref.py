"""Hugging Face model references (`user/repo[:QUANT]`) and picking a GGUF file from a listing.

Pure: no network, no files; the hub client and the cache scanner feed it file listings.

How a model argument is told apart (resolve.py applies it):
  1. a preset name (no slash) is a preset;
  2. `hf.co/...`, `huggingface.co/...` and `https://huggingface.co/...` are always references;
  3. anything that exists on disk, starts with `./`, `/` or `~`, or ends in `.gguf` is a path;
  4. `owner/name` or `owner/name:QUANT` (hub-legal characters, exactly one slash) is a reference.
So `./owner/name` forces a path and `hf.co/owner/name` forces a reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from specchat.errors import UsageError

DEFAULT_QUANT = "Q4_K_M"
_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "https://hf.co/",
             "huggingface.co/", "hf.co/")
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REF = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?::(?P<quant>[A-Za-z0-9._-]+))?$")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
_QUANT_LABEL = re.compile(r"(?<![a-z0-9])(i?q\d+(?:_[a-z0-9]+)*|bf16|f16|f32|fp16)(?![a-z0-9])",
                          re.IGNORECASE)


@dataclass(frozen=True)
class HfRef:
    """A repository on the hub and, optionally, which quantization of it."""

    repo: str
    quant: str | None = None
    revision: str = "main"

    def __str__(self) -> str:
        return self.repo + (f":{self.quant}" if self.quant else "")

    @property
    def key(self) -> str:
        """What a resolution is recorded under: repos and quants are case-insensitive."""
        return f"{self.repo.lower()}:{(self.quant or '').lower()}@{self.revision}"


@dataclass(frozen=True)
class GgufGroup:
    """One loadable model in a repo: a single file or every part of a split file, in order."""

    files: tuple[str, ...]
    size: int

    @property
    def first(self) -> str:
        return self.files[0]


def has_hub_prefix(spec: str) -> bool:
    return spec.lower().startswith(_PREFIXES)


def parse_ref(spec: str) -> HfRef | None:
    """The reference `spec` names, or None when it does not have the shape of one."""
    text = spec.strip()
    for prefix in _PREFIXES:
        if text.lower().startswith(prefix):
            text = text[len(prefix):]
            break
    revision = "main"
    # https://huggingface.co/owner/name/tree/REV or .../blob/REV/file: keep owner/name and REV.
    parts = text.split("/")
    if len(parts) > 2 and parts[2] in ("tree", "blob", "resolve") and len(parts) > 3:
        revision = parts[3]
        if not re.fullmatch(_NAME, revision):  # it names refs/REVISION on disk
            return None
        tail = "/".join(parts[4:])
        text = "/".join(parts[:2]) + (f":{tail}" if tail else "")
    match = _REF.match(text.rstrip("/"))
    if match is None:
        return None
    return HfRef(match["repo"], match["quant"] or None, revision)


def require_ref(spec: str) -> HfRef:
    ref = parse_ref(spec)
    if ref is None:
        raise UsageError(f"'{spec}' is not a Hugging Face reference; write owner/name or "
                         f"owner/name:QUANT (e.g. Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M)")
    return ref


def group_files(sizes: Mapping[str, int | None]) -> list[GgufGroup]:
    """The loadable GGUF models in a listing: split parts joined, incomplete splits dropped.

    Vision projectors (mmproj files) are not language models and never count, nor do names
    that are not plain relative paths (they become paths in the cache).
    """
    singles: list[GgufGroup] = []
    splits: dict[tuple[str, int], dict[int, str]] = {}
    for name, size in sizes.items():
        base = name.rsplit("/", 1)[-1].lower()
        if not base.endswith(".gguf") or base.startswith("mmproj") or not safe_path(name):
            continue
        split = _SPLIT.match(name)
        if split is None:
            singles.append(GgufGroup((name,), size or 0))
        else:
            key = (split["stem"], int(split["total"]))
            splits.setdefault(key, {})[int(split["part"])] = name
    groups = list(singles)
    for (_, total), found in splits.items():
        if sorted(found) == list(range(1, total + 1)):
            files = tuple(found[i] for i in range(1, total + 1))
            groups.append(GgufGroup(files, sum(sizes[f] or 0 for f in files)))
    return sorted(groups, key=lambda g: g.first.lower())


def safe_path(name: str) -> bool:
    """A plain relative path inside a repo: no absolute start, no `..`, no control bytes."""
    parts = name.split("/")
    return all(part and part not in (".", "..") and "\\" not in part
               and all(ch.isprintable() for ch in part) for part in parts)


def quant_label(group: GgufGroup) -> str:
    """The quantization a file name advertises ('Q4_K_M'), else the file name itself."""
    name = _SPLIT.sub(r"\g<stem>.gguf", group.first)
    found = _QUANT_LABEL.findall(name.rsplit("/", 1)[-1].removesuffix(".gguf"))
    return found[-1].upper() if found else group.first


def matches(group: GgufGroup, quant: str) -> bool:
    """Case-insensitive: an exact file name, or the quant as a whole token of the path.

    `_` belongs to the token on the right so that Q4_K does not also pick Q4_K_M.
    """
    want = quant.lower()
    if want.endswith(".gguf"):
        return any(f.lower() == want or f.lower().rsplit("/", 1)[-1] == want
                   for f in group.files)
    pattern = rf"(?<![a-z0-9]){re.escape(want)}(?![a-z0-9_])"
    return re.search(pattern, group.first.lower()) is not None


def choose(groups: list[GgufGroup], ref: HfRef, where: str) -> GgufGroup:
    """The group `ref` names: its quant, else Q4_K_M, else the smallest. UsageError if none.

    `where` names what was searched ("the repo", "the local cache") for the message.
    """
    if not groups:
        raise UsageError(f"{ref.repo}: {where} has no .gguf files; specchat needs a GGUF repo "
                         f"(many are named ...-GGUF)")
    if ref.quant is None:
        preferred = [g for g in groups if matches(g, DEFAULT_QUANT)]
        return min(preferred or groups, key=lambda g: (g.size, g.first))
    found = [g for g in groups if matches(g, ref.quant)]
    if not found:
        raise UsageError(f"{ref.repo} has no {ref.quant} file in {where}; it has "
                         f"{', '.join(available_quants(groups))} (write {ref.repo}:QUANT)")
    if len(found) > 1:
        names = ", ".join(g.first for g in found)
        raise UsageError(f"{ref}: {len(found)} files match {ref.quant} ({names}); write "
                         f"{ref.repo}:FILE_NAME.gguf to pick one")
    return found[0]


def available_quants(groups: list[GgufGroup]) -> list[str]:
    return sorted({quant_label(g) for g in groups}, key=str.lower)
