"""LM Studio's models folder, read in place: `-m lmstudio:publisher/repo[:QUANT or FILE]`.

Layout: <root>/<publisher>/<repo>/<file>.gguf, in ~/.lmstudio/models (and the older
~/.cache/lm-studio/models). A repo's files are grouped and chosen as a Hugging Face repo's are
(hfref: split parts joined, projectors left out, Q4_K_M when no quant is named).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from specchat.errors import UsageError
from specchat.models.hfref import GgufGroup, HfRef, choose, group_files, quant_label
from specchat.models.localfiles import (
    LocalModel,
    LocalSourceError,
    check_model_file,
    files,
    plain_name,
    subdirs,
)
from specchat.paths import lmstudio_model_dirs

PREFIX = "lmstudio:"


def find() -> Iterator[LocalModel | LocalSourceError]:
    """Every GGUF model in every LM Studio root: its file, or why it cannot be used."""
    for root in _roots():
        for repo_dir in _repos(root):
            groups = _groups(repo_dir)
            labels = [quant_label(g) for g in groups]
            for group, label in zip(groups, labels, strict=True):
                repo = f"{repo_dir.parent.name}/{repo_dir.name}"
                pick = label if labels.count(label) == 1 else group.first
                name = f"{PREFIX}{repo}:{pick}"
                try:
                    path, size = check_model_file(root, repo_dir / group.first,
                                                  f"LM Studio model {name}")
                except LocalSourceError as exc:
                    yield exc
                    continue
                yield LocalModel("lmstudio", name, path, size)


def resolve(spec: str) -> Path:
    """The file `lmstudio:publisher/repo[:QUANT]` names, checked."""
    rest = spec.removeprefix(PREFIX)
    repo, _, quant = rest.partition(":")
    parts = repo.split("/")
    if len(parts) != 2 or not all(plain_name(p) for p in parts) or \
            (quant and not plain_name(quant)):
        raise LocalSourceError(f"{spec!r} is not an LM Studio model name; write "
                               f"lmstudio:PUBLISHER/REPO[:QUANT or FILE.gguf]")
    for root in _roots():
        repo_dir = root / parts[0] / parts[1]
        groups = _groups(repo_dir)
        if not groups:
            continue
        try:
            group = choose(groups, HfRef(repo=repo, quant=quant or None), "LM Studio's folder")
        except UsageError as exc:
            raise LocalSourceError(str(exc)) from None
        return check_model_file(root, repo_dir / group.first, f"LM Studio model {spec}")[0]
    where = " or ".join(str(r) for r in lmstudio_model_dirs())
    raise LocalSourceError(f"no LM Studio model {repo} in {where}; `specchat models --local` "
                           f"lists what specchat sees")


def _roots() -> list[Path]:
    return [root for root in lmstudio_model_dirs() if root.is_dir()]


def _repos(root: Path) -> Iterator[Path]:
    for publisher in subdirs(root):
        yield from subdirs(publisher)


def _groups(repo_dir: Path) -> list[GgufGroup]:
    return group_files({f.name: 0 for f in files(repo_dir)})
