"""A recording loopback reverse proxy between a real client and the gateway.

It relays every request and reply unchanged (streams chunk by chunk, as they come) and records
what the client was answered: the status, and whether the body or any SSE event was an error.
That is how a test states "no overflow error reached the client" for clients that would hide it
(Pi exits 0 with no output after one) and how a report can name the exact request a client sent.
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Exchange", "Recorder"]

# Hop-by-hop headers are the proxy's own business on each side.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})
# The most of a reply body kept for inspection (the stream is relayed whole regardless).
_KEEP_BYTES = 4 * 1024 * 1024


@dataclass
class Exchange:
    """One request the client sent and what it was answered."""

    method: str
    path: str
    request_headers: dict[str, str]
    request_body: bytes
    status: int = 0
    reply_headers: dict[str, str] = field(default_factory=dict)
    reply_body: bytes = b""

    def error_events(self) -> list[str]:
        """The SSE events of the reply that carry an error (any API's shape)."""
        found = []
        event_name = ""
        for line in self.reply_body.decode(errors="replace").splitlines():
            if line.startswith("event:"):
                event_name = line[len("event:") :].strip()
                if event_name in ("error", "response.failed"):
                    found.append(line)
            elif line.startswith("data:"):
                data = line[len("data:") :].strip()
                try:
                    payload: Any = json.loads(data)
                except ValueError:
                    continue
                if isinstance(payload, dict) and (
                    payload.get("error") or payload.get("type") in ("error", "response.failed")
                ):
                    found.append(data[:500])
        return found

    def is_error(self) -> bool:
        """True when the client got an error: an HTTP status >= 400 or an error event."""
        return self.status >= 400 or bool(self.error_events())

    def summary(self) -> str:
        """One line for an assertion message."""
        return f"{self.method} {self.path} -> {self.status}: {self.reply_body[:400]!r}"


class Recorder:
    """Listen on a free loopback port; relay to ``target`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.target_host = parts.hostname or "127.0.0.1"
        self.target_port = parts.port or 80
        self.exchanges: list[Exchange] = []
        recorder = self

        class Handler(_Relay):
            owner = recorder

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        """The proxy's base URL (no ``/v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def errors(self) -> list[Exchange]:
        """Every exchange whose reply was an error."""
        return [exchange for exchange in self.exchanges if exchange.is_error()]


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read the recorder's exchanges."""

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _relay(self) -> None:
        body = self._read_body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        exchange = Exchange(self.command, self.path, headers, body)
        self.owner.exchanges.append(exchange)
        connection = http.client.HTTPConnection(
            self.owner.target_host, self.owner.target_port, timeout=600
        )
        try:
            connection.request(self.command, self.path, body=body or None, headers=headers)
            reply = connection.getresponse()
            exchange.status = reply.status
            exchange.reply_headers = dict(reply.getheaders())
            self.send_response(reply.status)
            for key, value in reply.getheaders():
                if key.lower() not in _HOP:
                    self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            kept = bytearray()
            while True:
                chunk = reply.read1(65536)
                if not chunk:
                    break
                if len(kept) < _KEEP_BYTES:
                    kept += chunk
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            exchange.reply_body = bytes(kept)
        except OSError as exc:
            exchange.status = 599
            exchange.reply_body = f"relay failed: {exc!r}".encode()
            self.close_connection = True
        finally:
            connection.close()

    do_GET = _relay
    do_POST = _relay
    do_PUT = _relay
    do_DELETE = _relay
