"""The Hugging Face hub, as every download path here uses it: whether it can be reached at all,
what a file's final URL and size are, and one resumable way to stream a file to disk.

The reachability probe is a short DNS + TCP check: on a machine without a route to the hub,
huggingface_hub's own retry loop takes ~23 s before giving up, and falling through to the
mirror should take seconds. HF_HUB_OFFLINE=1 or SPECCHAT_NO_HUB=1 skip the hub entirely.

Why not plain hf_hub_download for the bytes: since huggingface_hub 1.x a download writes to a
process-unique temporary file that is deleted when the process stops, so a 9 GB download cut
by Ctrl-C or a dropped link starts again from zero. Here a file is streamed to DEST.incomplete
with a Range request for what is already there; only the complete file is renamed to DEST.

What the hub sends is not trusted (docs/security.md): an ETag becomes a file name only when it
is plain hex; the bearer token goes to the hub's own host and never to a host a redirect
names; a body that is a web page, longer than announced, not a GGUF file or not matching the
listed sha256 is dropped, never kept to be "resumed" later.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from specchat import fileio
from specchat.errors import DownloadError, UsageError
from specchat.models.progress import Reporter, human_size, make_reporter, say

PROBE_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0  # a download that receives nothing for this long stops (and resumes later)
MAX_REDIRECTS = 5
# (connect, read, write, pool): the form both httpx and httpx2 take without importing either.
TIMEOUTS = (REQUEST_TIMEOUT_S, READ_TIMEOUT_S, REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_S)
GGUF_MAGIC = b"GGUF"  # every file fetched here is a GGUF file (each part of a split one too)
# A git blob hash (sha1) or an LFS sha256: what the hub's ETags are, and safe as a file name.
_HASH = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
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
    """Where a file's bytes are served from, its size and ETag, as the hub says.

    The ETag names the blob on disk (blobs/ETAG), so it is checked to be plain hex: the git
    hash of a small file or the sha256 of a large (LFS) one, never a path.
    """

    url: str
    size: int | None
    etag: str

    @property
    def sha256(self) -> str | None:
        """The file's sha256 when the ETag is one (LFS files: every GGUF on the hub)."""
        return self.etag.lower() if len(self.etag) == 64 else None


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
    if not _HASH.fullmatch(meta.etag):
        raise DownloadError(f"the hub sent an ETag for {repo}/{name} that is not a content hash "
                            f"({meta.etag[:80]!r}); refused (a proxy or a hostile server?)")
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


def stream(url: str, dest: Path, size: int | None, name: str, *, quiet: bool,
           sha256: str | None = None) -> str:
    """Append the rest of the file to DEST.incomplete, verify it, rename it to DEST; returns
    its sha256.

    A download cut short keeps its partial file and the same call resumes it later; a body
    that is not the file (a login page, more bytes than announced, a wrong checksum) is
    never kept. `sha256` is what the listing or the ETag says the file hashes to.
    """
    partial = dest.with_name(dest.name + ".incomplete")
    try:
        # A model file is the hub's content, not the user's words: a plain append is right,
        # and what is on disk after a crash is exactly what the next Range request resumes.
        with partial.open("a+b") as out:
            body = _Body(out, size, name, make_reporter(quiet))
            if body.done:
                say(quiet, f"resuming {name} at {human_size(body.done)}")
            _get(url, body)
            digest = body.digest.hexdigest()
    except DownloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - the partial file stays for the next try
        reason = fileio.describe(exc) if isinstance(exc, OSError) else \
            (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise DownloadError(f"download of {name} stopped: {reason}; run the same command "
                            f"again to resume") from None
    got = partial.stat().st_size
    if size is not None and got != size:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{name}: got {got} bytes, the hub said {size}; removed, run the "
                            f"same command again")
    if sha256 is not None and digest != sha256.lower():
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{name}: sha256 {digest} is not the {sha256.lower()} the hub lists; "
                            f"the download was removed, run the same command again")
    os.replace(partial, dest)
    return digest


def same_origin(url: str, home: str) -> bool:
    """Whether `url` is on the hub endpoint's own host (scheme, host and port), the only
    place our credentials go."""
    a, b = urlsplit(url), urlsplit(home)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def _get(url: str, body: _Body) -> None:
    """GET the rest of the file, following redirects by hand: the bearer token goes to the
    hub endpoint only, never to a host a redirect names (a CDN, or anyone else)."""
    # huggingface_hub's own client: httpx under 1.x, httpx2 under 2.x, neither ours to import
    # (a fresh install has only the one huggingface_hub depends on), and with it whatever
    # proxy or certificates the user gave huggingface_hub (set_client_factory).
    from huggingface_hub.utils import build_hf_headers, get_session

    headers = {**build_hf_headers(), "Accept-Encoding": "identity"}
    home = hub_endpoint()
    client = get_session()
    for _ in range(MAX_REDIRECTS + 1):
        sent = {k: v for k, v in headers.items()
                if same_origin(url, home) or k.lower() != "authorization"}
        if body.done:
            sent["Range"] = f"bytes={body.done}-"
        with client.stream("GET", url, headers=sent, follow_redirects=False,
                           timeout=TIMEOUTS) as response:
            if response.is_redirect:
                url = str(response.url.join(response.headers["location"]))
                continue
            body.receive(response)
            return
    raise DownloadError(f"the hub redirected {body.name} more than {MAX_REDIRECTS} times; try "
                        f"again later")


class _Body:
    """The file being written: what is on disk already (hashed again on resume), and each
    response's bytes appended after checking they can be the file."""

    def __init__(self, out: BinaryIO, size: int | None, name: str, reporter: Reporter) -> None:
        self.out, self.size, self.name, self.reporter = out, size, name, reporter
        self.digest = hashlib.sha256()
        self.done = out.tell()
        out.seek(0)
        head = out.read(len(GGUF_MAGIC))
        if not GGUF_MAGIC.startswith(head) or (size is not None and self.done > size):
            self.restart()  # not the start of this file: a page kept by an older version
        else:
            out.seek(0)
            while block := out.read(1 << 20):
                self.digest.update(block)
        self.head = head

    def restart(self) -> None:
        self.out.seek(0)
        self.out.truncate()
        self.digest = hashlib.sha256()
        self.done = 0
        self.head = b""

    def receive(self, response: Any) -> None:
        status = response.status_code
        if status == 416 and self.size is not None and self.done == self.size:
            return  # everything was there already
        if status not in (200, 206):
            raise DownloadError(f"the hub answered {status} for {self.name}"
                                + _STATUS_HINTS.get(status, "; try again later"))
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind in ("text/html", "application/xhtml+xml"):
            raise DownloadError(f"the hub sent a web page instead of {self.name} (a login page "
                                f"or a proxy's notice?); nothing was kept")
        if status == 200 and self.done:
            self.restart()  # the server ignored the Range: it sends the whole file
        elif status == 206 and not response.headers.get("content-range", "").startswith(
                f"bytes {self.done}-"):
            raise DownloadError(f"the hub resumed {self.name} at the wrong place; run the same "
                                f"command again")
        self.reporter.start(f"{self.name.rsplit('/', 1)[-1]}", self.size or 0)
        self.reporter.advance(self.done)
        try:
            for block in response.iter_bytes():
                self._write(block)
        finally:
            self.reporter.close()

    def _write(self, block: bytes) -> None:
        if self.size is not None and self.done + len(block) > self.size:
            self.restart()
            raise DownloadError(f"the hub sent more than the {self.size} bytes of {self.name} "
                                f"it announced; nothing was kept")
        if len(self.head) < len(GGUF_MAGIC):
            self.head += block[:len(GGUF_MAGIC) - len(self.head)]
            if not GGUF_MAGIC.startswith(self.head):
                self.restart()
                raise DownloadError(f"what the hub sent for {self.name} is not a GGUF file; "
                                    f"nothing was kept")
        self.out.write(block)
        self.digest.update(block)
        self.done += len(block)
        self.reporter.advance(len(block))


_STATUS_HINTS = {401: "; log in with `hf auth login` (or set HF_TOKEN) if the repo is private",
                 403: "; the repo may be gated: accept its terms on the hub and log in with "
                      "`hf auth login`",
                 404: "; the file is gone from the hub"}
