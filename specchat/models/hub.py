"""The Hugging Face hub, as every download path here uses it: whether it can be reached at all,
what a file's final URL and size are, and one resumable way to stream a file to disk.

The reachability probe is a short DNS + TCP check: on a machine without a route to the hub,
huggingface_hub's own retry loop takes ~23 s before giving up, and falling through to the
mirror should take seconds. HF_HUB_OFFLINE=1 or SPECCHAT_NO_HUB=1 skip the hub entirely.

Why not plain hf_hub_download for the bytes: since huggingface_hub 1.x a download writes to a
process-unique temporary file that is deleted when the process stops, so a 9 GB download cut
by Ctrl-C or a dropped link starts again from zero. Here a file is streamed to DEST.incomplete
with huggingface_hub's own http_get and a Range request for what is already there; only the
complete file is renamed to DEST.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from specchat.errors import DownloadError, UsageError
from specchat.models.progress import human_size, on_stderr, say

PROBE_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 10.0
_TRUE = ("1", "true", "yes", "on")


def hub_endpoint() -> str:
    """HF_ENDPOINT read now: huggingface_hub reads it once at import, tests set it later."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


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


@dataclass(frozen=True)
class RemoteFile:
    """Where a file's bytes are served from, its size and ETag, as the hub says."""

    url: str
    size: int | None
    etag: str


def remote_file(repo: str, name: str, revision: str | None) -> RemoteFile:
    """What the hub says about `name` in `repo` at `revision` (one HEAD request)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    try:
        meta = get_hf_file_metadata(hf_hub_url(repo, name, revision=revision,
                                               endpoint=hub_endpoint()),
                                    timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - every hub failure becomes one line
        raise hub_error(repo, revision or "main", exc) from None
    if not meta.etag or not meta.location:
        raise DownloadError(f"the hub sent no ETag for {repo}/{name}; try again later")
    return RemoteFile(meta.location, meta.size, meta.etag)


def hub_error(repo: str, revision: str, exc: Exception) -> Exception:
    """A hub failure as one line the user can act on."""
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):
        return UsageError(f"{repo} is gated: accept its terms on the hub and log in with "
                          f"`hf auth login`, then retry")
    if isinstance(exc, RepositoryNotFoundError):
        return UsageError(f"no repository {repo} on the hub (nor a local file of that name); "
                          f"check the spelling, or log in with `hf auth login` if it is private")
    if isinstance(exc, RevisionNotFoundError):
        return UsageError(f"{repo} has no revision {revision}")
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return DownloadError(f"could not list {repo} on the hub: {first[:200]}")


def stream(url: str, dest: Path, size: int | None, name: str, *, quiet: bool) -> None:
    """Append the rest of the file to DEST.incomplete, check its size, rename it to DEST.

    A download cut short keeps its partial file: the same call resumes it later.
    """
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers
    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    partial = dest.with_name(dest.name + ".incomplete")
    were_disabled = are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    try:
        # A model file is the hub's content, not the user's words: a plain append is right,
        # and what is on disk after a crash is exactly what the next Range request resumes.
        with partial.open("ab") as out:
            done = out.tell()
            if done:
                say(quiet, f"resuming {name} at {human_size(done)}")
            http_get(url, out, resume_size=done, headers=build_hf_headers(),
                     expected_size=size,
                     displayed_filename=on_stderr(name.rsplit("/", 1)[-1]))
    except Exception as exc:  # noqa: BLE001 - the partial file stays for the next try
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DownloadError(f"download of {name} stopped: {first[:200]}; run the same command "
                            f"again to resume") from None
    finally:
        if quiet and not were_disabled:
            enable_progress_bars()
    got = partial.stat().st_size
    if size is not None and got != size:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{name}: got {got} bytes, the hub said {size}; removed, run the "
                            f"same command again")
    os.replace(partial, dest)
