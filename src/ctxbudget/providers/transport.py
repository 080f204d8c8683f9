"""The HTTP client under the openai SDK, with a deadline per request and caps on what is read.

A response hook wraps every body before anyone reads it: a success body past ``max_bytes`` or a
body still arriving at the deadline raises `ReplyLimitError`; an error body is cut at a cap.
"""

from __future__ import annotations

import contextlib
import importlib
import socket
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any

import openai

from ctxbudget.providers.streaming import DeadlineExceeded, ReplyLimitError

__all__ = ["ERROR_BODY_BYTES", "deadline_scope", "http_client", "seconds_left"]

ERROR_BODY_BYTES = 64 * 1024
"""An error body is read up to this many bytes before it is classified; the rest is dropped
(every overflow and rate-limit text we know is under 2 KB)."""

_DEADLINE: ContextVar[float | None] = ContextVar("ctxbudget_request_deadline", default=None)


@contextlib.contextmanager
def deadline_scope(seconds: float) -> Iterator[float]:
    """Requests made inside must be over within ``seconds``; yields the monotonic deadline."""
    deadline = time.monotonic() + seconds
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


def seconds_left() -> float | None:
    """Seconds to the deadline of the current scope (may be negative); None outside one."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


def _sdk_http() -> ModuleType:
    """The HTTP library the installed openai SDK speaks: httpx2 (openai 3) or httpx (older)."""
    client = next(c for c in openai.DefaultHttpxClient.__mro__ if c.__name__ == "Client")
    return importlib.import_module(client.__module__.split(".")[0])


def http_client(max_bytes: int) -> Any:
    """An SDK-compatible client whose bodies are capped and bounded by the current deadline.

    Asks for uncompressed bodies, so the byte cap is a cap on what is decoded.
    """
    http = _sdk_http()
    stream_type = _capped_stream_type(http.SyncByteStream)

    def wrap(response: Any) -> None:
        limit = max_bytes if response.status_code < 400 else ERROR_BODY_BYTES
        response.stream = stream_type(
            response.stream,
            limit=limit,
            cut=response.status_code >= 400,
            deadline=_DEADLINE.get(),
            sock=_socket_of(response),
        )

    return openai.DefaultHttpxClient(
        headers={"Accept-Encoding": "identity"}, event_hooks={"response": [wrap]}
    )


def _socket_of(response: Any) -> socket.socket | None:
    stream = response.extensions.get("network_stream")
    try:
        sock = stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # a transport without sockets (tests' mock transports)
        return None
    return sock if isinstance(sock, socket.socket) else None


def _capped_stream_type(base: Any) -> Any:
    class CappedStream(base):  # type: ignore[misc]
        """A body that stops at ``limit`` bytes (cut, or an error) and at the deadline."""

        def __init__(
            self,
            inner: Any,
            *,
            limit: int,
            cut: bool,
            deadline: float | None,
            sock: socket.socket | None,
        ) -> None:
            self._inner = inner
            self._limit = limit
            self._cut = cut
            self._deadline = deadline
            self._sock = sock
            self._expired = threading.Event()
            self._timer: threading.Timer | None = None

        def __iter__(self) -> Iterator[bytes]:
            self._arm()
            seen = 0
            try:
                for piece in self._inner:
                    self._check_deadline()
                    seen += len(piece)
                    if seen > self._limit:
                        if self._cut:
                            yield piece[: len(piece) - (seen - self._limit)]
                            return
                        raise ReplyLimitError(
                            f"reply larger than the {self._limit:,}-byte cap; stopped reading "
                            "(raise max_reply_bytes, --max-reply-bytes, if it is real)"
                        )
                    yield piece
            except ReplyLimitError:
                raise
            except Exception:
                self._check_deadline()  # the watchdog shut the socket: say why
                raise
            self._check_deadline()

        def _arm(self) -> None:
            """A watchdog that shuts the socket at the deadline, waking a blocked read."""
            if self._deadline is None or self._sock is None or self._timer is not None:
                return
            self._timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), self._expire)
            self._timer.daemon = True
            self._timer.start()

        def _expire(self) -> None:
            self._expired.set()
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)

        def _check_deadline(self) -> None:
            late = self._deadline is not None and time.monotonic() >= self._deadline
            if late or self._expired.is_set():
                raise DeadlineExceeded("deadline")

        def close(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._inner.close()

    return CappedStream
