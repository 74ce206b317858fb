"""A tiny stand-in for the Hugging Face hub, served from a thread on 127.0.0.1.

It answers what huggingface_hub asks for: the model-info API with file sizes
(GET /api/models/OWNER/NAME/revision/REV?blobs=true) and files
(HEAD/GET /OWNER/NAME/resolve/REV/PATH with X-Repo-Commit, ETag, Content-Length and Range).
Every request is logged so tests can count them; `cut_after` makes the next GET of a file send
only that many bytes and drop the connection, as a failing network would.

Hostile or broken hubs, for the hardening tests: `etag` replaces every file's ETag header;
`cdn` (another FakeHub's URL) makes file requests answer 302 to it, as the real hub sends
large files to a CDN; `html_pages` answers that many file GETs with a login page (status 200,
text/html).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class FakeHub:
    """repos: 'owner/name' -> {path: bytes}."""

    repos: dict[str, dict[str, bytes]]
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    cut_after: int | None = None
    url: str = ""
    etag: str | None = None
    cdn: str | None = None
    html_pages: int = 0
    with_lfs: bool = True  # the listing carries each file's sha256, as the real hub's does
    listed_sha256: dict[str, str] = field(default_factory=dict)  # what the listing claims

    def file_requests(self, method: str = "GET") -> list[tuple[str, str, dict[str, str]]]:
        return [r for r in self.requests if r[0] == method and "/resolve/" in r[1]]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def _serve(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path, dict(self.headers)))
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
                self._info("/".join(parts[2:4]))
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._file("/".join(parts[:2]), "/".join(parts[4:]), body)
            else:
                self._error(404, "EntryNotFound")

        def _info(self, repo: str) -> None:
            files = hub.repos.get(repo)
            if files is None:
                self._error(404, "RepoNotFound")
                return
            siblings = [{"rfilename": name, "size": len(data)} for name, data in files.items()]
            if hub.with_lfs:
                for sibling, data in zip(siblings, files.values()):
                    sha256 = hub.listed_sha256.get(sibling["rfilename"],  # type: ignore[arg-type]
                                                   hashlib.sha256(data).hexdigest())
                    sibling["lfs"] = {"size": len(data), "sha256": sha256, "pointerSize": 130}
            payload = json.dumps({"id": repo, "sha": COMMIT, "siblings": siblings}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _file(self, repo: str, name: str, body: bool) -> None:
            if repo not in hub.repos:
                self._error(404, "RepoNotFound")
                return
            data = hub.repos[repo].get(name)
            if data is None:
                self._error(404, "EntryNotFound")
                return
            etag = hub.etag or f'"{hashlib.sha256(data).hexdigest()}"'
            if hub.cdn is not None:
                self.send_response(302)
                self.send_header("Location", hub.cdn + self.path)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("X-Linked-Etag", etag)
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if body and hub.html_pages:
                hub.html_pages -= 1
                self._page()
                return
            start = 0
            wanted = self.headers.get("Range", "")
            if wanted.startswith("bytes=") and wanted.endswith("-"):
                start = int(wanted[6:-1])
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(data) - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            chunk = data[start:]
            if hub.cut_after is not None:
                chunk, hub.cut_after = chunk[:hub.cut_after], None
                self.wfile.write(chunk)
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(chunk)

        def _page(self) -> None:
            page = b"<!DOCTYPE html><html><body>Please log in to continue.</body></html>\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def _error(self, status: int, code: str) -> None:
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextmanager
def serve(hub: FakeHub, name: str = "127.0.0.1") -> Iterator[FakeHub]:
    """Serve `hub` on 127.0.0.1; its URL says `name` (`localhost` makes another host)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://{name}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


# --- a tiny repository to serve ---------------------------------------------------------------
REPO = "me/tiny-GGUF"
Q8 = b"GGUF" + bytes(range(256)) * 8
Q4 = b"GGUF" + b"\x04" * 3000
PART1 = b"GGUF" + b"\x01" * 700
PART2 = b"GGUF" + b"\x02" * 896  # each part of a split file is a GGUF file


def tiny_repo() -> dict[str, dict[str, bytes]]:
    """REPO with two quantizations, a README and a model split in two files."""
    return {REPO: {"tiny-Q8_0.gguf": Q8, "tiny-Q4_K_M.gguf": Q4, "README.md": b"# tiny",
                   "split/big-Q2_K-00001-of-00002.gguf": PART1,
                   "split/big-Q2_K-00002-of-00002.gguf": PART2}}
