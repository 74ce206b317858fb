"""`specchat models --drafts-for MODEL`: which models on this machine can draft for MODEL
(presets, the Hugging Face cache, and the models ollama, LM Studio and llama.cpp keep).

A downloaded candidate is judged on its real vocabulary (read without its weights) by the same
rule `--spec draft` applies, and must be smaller than the target to be worth running. A preset
not downloaded yet cannot be checked; its models.toml `family` says whether it is likely to fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.errors import SpecchatError
from specchat.models.hfcache import cached_gguf_files
from specchat.models.local import local_models
from specchat.models.presets import Preset, load_presets
from specchat.models.progress import human_size
from specchat.models.resolve import preset_file, preset_present, resolve_model


@dataclass(frozen=True)
class Candidate:
    """One possible draft and the verdict: True can draft, False cannot, None not checked."""

    name: str
    size: int
    verdict: bool | None
    reason: str
    path: str | None = None


def drafts_for(spec: str) -> tuple[Path, list[Candidate]]:
    """The target's file and every preset / cached GGUF judged as its draft, usable first."""
    presets = load_presets()
    target = resolve_model(spec, pull=False, quiet=True)
    judge = _Judge(target, presets[spec].family if spec in presets else None)
    found = [judge.preset(p) for p in presets.values() if p.name != spec]
    seen = {str(target.resolve())} | {c.path for c in found if c.path}
    others = [(f"{c.repo}:{c.file}", c.path) for c in cached_gguf_files()]
    others += [(m.name, m.path) for m in local_models()[0]]  # ollama, LM Studio, llama.cpp
    for name, path in others:
        if str(path.resolve()) not in seen:
            seen.add(str(path.resolve()))
            found.append(judge.file(name, path))
    order = {True: 0, None: 1, False: 2}
    return target, sorted(found, key=lambda c: (order[c.verdict], c.size))


class _Judge:
    def __init__(self, target: Path, family: str | None) -> None:
        from specchat.llm import read_vocab_info

        self._read = read_vocab_info
        self._target = read_vocab_info(target)
        self._target_path = target.resolve()
        self._size = _total_size(target)
        self._family = family

    def preset(self, preset: Preset) -> Candidate:
        if preset_present(preset):
            return self.file(preset.name, preset_file(preset))
        if preset.size >= self._size:
            return Candidate(preset.name, preset.size, False, self._not_smaller(preset.size))
        if self._family and preset.family:
            if preset.family == self._family:
                return Candidate(preset.name, preset.size, None,
                                 f"not downloaded: same family ({preset.family}), likely fits; "
                                 f"`specchat pull {preset.name}` to check")
            return Candidate(preset.name, preset.size, False,
                             f"not downloaded: another family ({preset.family} vs "
                             f"{self._family}), vocabularies differ")
        return Candidate(preset.name, preset.size, None, "not downloaded: cannot check")

    def file(self, name: str, path: Path) -> Candidate:
        from specchat.llm import compatibility_problems

        size = _total_size(path)
        resolved = str(path.resolve())
        try:
            problems = compatibility_problems(self._target, self._read(path))
        except SpecchatError as exc:
            return Candidate(name, size, False, f"cannot read: {exc}", resolved)
        if problems:
            more = f"; {len(problems) - 2} more differences" if len(problems) > 2 else ""
            return Candidate(name, size, False,
                             "; ".join(problems[:2]) + more + " (target vs draft)", resolved)
        if size >= self._size:
            return Candidate(name, size, False, self._not_smaller(size), resolved)
        return Candidate(name, size, True,
                         f"same vocabulary, {self._size / max(size, 1):.1f}x smaller", resolved)

    def _not_smaller(self, size: int) -> str:
        return (f"not smaller than the target ({human_size(size)} vs "
                f"{human_size(self._size)}): drafting would cost more than it saves")


def _total_size(path: Path) -> int:
    from specchat.llm.gguf import gguf_parts

    try:
        return sum(p.stat().st_size for p in gguf_parts(path))
    except OSError:
        return 0
