"""Other tools' model folders, laid out as those tools lay them out: an ollama manifest and its
blob, files linked (or copied) into place."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

REGISTRY = "registry.test"  # ollama's own is a host name; any folder name works the same


def link_or_copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


def ollama_model(root: Path, name: str, tag: str, blob_of: Path | None,
                 namespace: str = "library", media: str = "application/vnd.ollama.image.model",
                 digest: str | None = None) -> Path:
    """An ollama manifest for `blob_of` (stored as ollama stores blobs), as `ollama pull`
    leaves it; `digest` overrides what the manifest names."""
    hexdigest = hashlib.sha256(name.encode() + tag.encode()).hexdigest()
    if blob_of is not None:
        link_or_copy(blob_of, root / "blobs" / f"sha256-{hexdigest}")
    manifest = root / "manifests" / REGISTRY / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": "sha256:" + "0" * 64, "size": 10},
        "layers": [{"mediaType": "application/vnd.ollama.image.template",
                    "digest": "sha256:" + "1" * 64, "size": 5},
                   {"mediaType": media, "digest": digest or f"sha256:{hexdigest}",
                    "size": 1}]}))
    return manifest
