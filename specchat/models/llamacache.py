"""llama.cpp's download cache, read in place: `-m llamacpp:FILE`.

`llama-cli -hf owner/repo` keeps each file it downloads as one flat file in its cache folder
(paths.llama_cache_dir), named `<owner>_<repo>_<file>` with every `/` made `_`, beside a
`.json` of download metadata; a file being downloaded has another suffix until it is done. The
name cannot be split back into owner, repo and file (each may hold `_`), so the file name is
the model's name here; `llamacpp:NAME` also takes it without `.gguf`, or a quant that only one
file carries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from specchat.models.hfref import GgufGroup, group_files, matches
from specchat.models.localfiles import (
    LocalModel,
    LocalSourceError,
    check_model_file,
    files,
    plain_name,
)
from specchat.paths import llama_cache_dir

PREFIX = "llamacpp:"


def find() -> Iterator[LocalModel | LocalSourceError]:
    root = llama_cache_dir()
    for group in _groups(root):
        name = PREFIX + group.first
        try:
            path, size = check_model_file(root, root / group.first, f"llama.cpp model {name}")
        except LocalSourceError as exc:
            yield exc
            continue
        yield LocalModel("llama.cpp", name, path, size)


def resolve(spec: str) -> Path:
    """The file `llamacpp:NAME` names, checked."""
    root = llama_cache_dir()
    want = spec.removeprefix(PREFIX)
    if not plain_name(want):
        raise LocalSourceError(f"{spec!r} is not a llama.cpp cache name; write llamacpp:FILE "
                               f"(`specchat models --local` lists them)")
    groups = _groups(root)
    found = [g for g in groups if g.first.lower() in (want.lower(), want.lower() + ".gguf")] \
        or [g for g in groups if matches(g, want)]
    if len(found) != 1:
        how = "several files match" if found else "no file matches"
        raise LocalSourceError(f"{spec}: {how} in llama.cpp's cache {root}; write "
                               f"llamacpp:FILE (`specchat models --local` lists them)")
    return check_model_file(root, root / found[0].first, f"llama.cpp model {spec}")[0]


def _groups(root: Path) -> list[GgufGroup]:
    return group_files({f.name: 0 for f in files(root)})
