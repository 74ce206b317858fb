"""ollama's model folder, read in place: `-m ollama:qwen2.5-coder:7b`.

Layout: <root>/manifests/<registry>/<namespace>/<model>/<tag> is a JSON manifest whose layer
of media type application/vnd.ollama.image.model names the weights by digest, stored as
<root>/blobs/sha256-<hex>. `model[:tag]` is in the `library` namespace of any registry,
`user/model[:tag]` in that namespace, `registry/namespace/model[:tag]` exactly; no tag means
`latest`. A manifest is read through fileio's bounded reader; its digest must be a sha256
(so it cannot name a path), and the blob must be a regular GGUF file inside the root.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from specchat import fileio, fileread
from specchat.models.localfiles import (
    LocalModel,
    LocalSourceError,
    check_model_file,
    files,
    inside,
    plain_name,
    subdirs,
)
from specchat.paths import ollama_model_dirs

PREFIX = "ollama:"
MODEL_LAYER = "application/vnd.ollama.image.model"
MANIFEST_LIMIT = 1 << 20  # real manifests are under 2 KB
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def find() -> Iterator[LocalModel | LocalSourceError]:
    """Every manifest under every ollama root: its model, or why it cannot be used."""
    for root in _roots():
        for manifest, (_, namespace, model, tag) in _manifests(root):
            name = _short_name(namespace, model, tag)
            try:
                path, size = _model_blob(root, manifest, f"ollama model {name}")
            except LocalSourceError as exc:
                yield exc
                continue
            yield LocalModel("ollama", PREFIX + name, path, size)


def resolve(spec: str) -> Path:
    """The blob `ollama:NAME[:TAG]` names, checked; LocalSourceError when there is none."""
    wanted = _parse(spec)
    found = [(root, manifest, key) for root in _roots()
             for manifest, key in _manifests(root) if _matches(wanted, key)]
    if not found:
        raise LocalSourceError(f"no ollama model {spec}{_where()}; `ollama list` shows "
                               f"what is there, `specchat models --local` what specchat sees")
    if len({key for _, _, key in found}) > 1:
        names = ", ".join(PREFIX + "/".join(key[:3]) + ":" + key[3] for _, _, key in found)
        raise LocalSourceError(f"{spec} names several ollama models ({names}); write one "
                               f"of those")
    root, manifest, key = found[0]
    return _model_blob(root, manifest, f"ollama model {_short_name(*key[1:])}")[0]


def _roots() -> list[Path]:
    return [root for root in ollama_model_dirs() if (root / "manifests").is_dir()]


def _where() -> str:
    return " in " + " or ".join(str(r) for r in ollama_model_dirs())


def _parse(spec: str) -> tuple[str | None, str, str, str]:
    """(registry or None for any, namespace, model, tag) of `ollama:NAME[:TAG]`."""
    rest = spec.removeprefix(PREFIX)
    path, _, tag = rest.rpartition(":") if ":" in rest.rpartition("/")[2] else (rest, "", "")
    tag = tag or "latest"
    parts = path.split("/")
    if not all(plain_name(p) for p in parts) or len(parts) > 3 or not _TAG.fullmatch(tag):
        raise LocalSourceError(f"{spec!r} is not an ollama model name; write ollama:MODEL[:TAG], "
                               f"ollama:USER/MODEL[:TAG] or ollama:REGISTRY/NAMESPACE/MODEL[:TAG]")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2], tag
    if len(parts) == 2:
        return None, parts[0], parts[1], tag
    return None, "library", parts[0], tag


def _matches(wanted: tuple[str | None, str, str, str], key: tuple[str, str, str, str]) -> bool:
    registry, namespace, model, tag = wanted
    return (registry is None or registry == key[0]) and (namespace, model, tag) == key[1:]


def _manifests(root: Path) -> Iterator[tuple[Path, tuple[str, str, str, str]]]:
    for registry in subdirs(root / "manifests"):
        for namespace in subdirs(registry):
            for model in subdirs(namespace):
                for tag in files(model):
                    yield tag, (registry.name, namespace.name, model.name, tag.name)


def _short_name(namespace: str, model: str, tag: str) -> str:
    return (model if namespace == "library" else f"{namespace}/{model}") + f":{tag}"


def _model_blob(root: Path, manifest: Path, what: str) -> tuple[Path, int]:
    """The model layer's blob named by `manifest`, checked: (path, size)."""
    inside(root, manifest, what)
    try:
        data = json.loads(fileread.read_limited(manifest, MANIFEST_LIMIT))
    except fileio.FileIOError as exc:
        raise LocalSourceError(f"{what}: manifest {manifest} {exc.reason}") from None
    except (OSError, ValueError):
        raise LocalSourceError(f"{what}: manifest {manifest} is not JSON") from None
    layers = data.get("layers") if isinstance(data, dict) else None
    models = [layer for layer in layers if isinstance(layer, dict)
              and layer.get("mediaType") == MODEL_LAYER] if isinstance(layers, list) else []
    if not models:
        raise LocalSourceError(f"{what}: manifest {manifest} has no model layer ({MODEL_LAYER})")
    digest = models[0].get("digest")
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        raise LocalSourceError(f"{what}: manifest {manifest} names its model layer "
                               f"{str(digest)[:80]!r}, not a sha256 digest; refused")
    return check_model_file(root, root / "blobs" / f"sha256-{match.group(1)}", what)
