"""A stand-in for an OpenAI-compatible server that misbehaves on request, served from a
thread on 127.0.0.1, for the tests of `--endpoint` against broken or hostile servers.

`mode` says what POST /v1/chat/completions answers:
  ok          a proper stream: the role, one chunk per word, a finish reason, usage, [DONE]
  cut         a few chunks, then the body ends (no finish reason, no [DONE])
  html        200 with a web page
  huge_line   one `data:` line that never ends (up to 200 MB, until the client leaves)
  endless     one chunk after another, never a finish reason (max_tokens ignored)
  malformed   an event that is not JSON
  wrong_shape JSON events whose fields have the wrong types
  silent      never answers (the test ends it)
  redirect    307 to `target` + the same path (another server), or to /v2/... on this one
`words` are what `ok` streams (and `cut` begins); a request whose body holds `refuse` gets a
400 whose message holds them. GET /v1/models lists one model. Every request is recorded
(method, path, headers, body).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ["Hello", " from", " a", " fake", " server", "."]


@dataclass
class FakeEndpoint:
    mode: str = "ok"
    words: list[str] = field(default_factory=lambda: list(WORDS))
    refuse: str | None = None
    target: str | None = None  # where `redirect` points (None: this server's /v2)
    url: str = ""
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    sent_chunks: int = 0
    release: threading.Event = field(default_factory=threading.Event)


def chunk(text: str | None = None, reason: str | None = None, role: bool = False) -> bytes:
    delta: dict[str, str] = {"role": "assistant"} if role else {}
    if text is not None:
        delta["content"] = text
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _handler(ep: FakeEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # a body ends when the connection closes

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            ep.requests.append(("GET", self.path, dict(self.headers), b""))
            body = json.dumps({"object": "list", "data": [
                {"id": "fake", "object": "model", "created": 1, "owned_by": "t"}]}).encode()
            self._head(200, "application/json", len(body))
            self.wfile.write(body)

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size)
            ep.requests.append(("POST", self.path, dict(self.headers), body))
            mode = "ok" if self.path.startswith("/v2/") else ep.mode  # where redirects lead
            if ep.refuse is not None and ep.refuse.encode() in body:
                mode = "refused"
            try:
                getattr(self, f"_{mode}")()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: what several modes expect

        def _head(self, status: int, kind: str, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def _refused(self) -> None:
            error = json.dumps({"error": {"message": f"refused {''.join(ep.words)}",
                                          "type": "x"}}).encode()
            self._head(400, "application/json", len(error))
            self.wfile.write(error)

        def _ok(self) -> None:
            self._head(200, "text/event-stream")
            self.wfile.write(chunk("", role=True))
            for word in ep.words:
                self.wfile.write(chunk(word))
            self.wfile.write(chunk(reason="stop"))
            self.wfile.write(b"data: [DONE]\n\n")

        def _cut(self) -> None:
            self._head(200, "text/event-stream")
            for word in ep.words[:3]:
                self.wfile.write(chunk(word))

        def _html(self) -> None:
            page = b"<html><body>Sign in to continue</body></html>"
            self._head(200, "text/html; charset=utf-8", len(page))
            self.wfile.write(page)

        def _huge_line(self) -> None:
            self._head(200, "text/event-stream")
            self.wfile.write(b"data: ")
            block = b"x" * (1 << 20)
            for _ in range(200):
                self.wfile.write(block)

        def _endless(self) -> None:
            self._head(200, "text/event-stream")
            for i in range(100_000):
                self.wfile.write(chunk(f" w{i}"))
                self.wfile.flush()
                ep.sent_chunks = i + 1

        def _malformed(self) -> None:
            self._head(200, "text/event-stream")
            self.wfile.write(chunk("Hi"))
            self.wfile.write(b"data: {this is not json\n\n")

        def _wrong_shape(self) -> None:
            self._head(200, "text/event-stream")
            self.wfile.write(chunk("Hi"))
            self.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n')

        def _silent(self) -> None:
            ep.release.wait(120)

        def _redirect(self) -> None:
            where = ep.target + self.path if ep.target else self.path.replace("/v1/", "/v2/")
            self.send_response(307)
            self.send_header("Location", where)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextmanager
def serve(ep: FakeEndpoint, name: str = "127.0.0.1") -> Iterator[FakeEndpoint]:
    """Serve on 127.0.0.1; the URL says `name` (`localhost` makes another host)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ep))
    server.daemon_threads = True
    ep.url = f"http://{name}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ep
    finally:
        ep.release.set()
        server.shutdown()
        server.server_close()
