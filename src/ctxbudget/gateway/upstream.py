"""The HTTP client to the upstream server: httpcore's connection pool with deadlines and caps.

Bounds (the provider's own, `ctxbudget.providers.limits`): connecting takes at most
``connect_timeout``; a silence (before the first byte or between two) at most ``read_timeout``;
one whole exchange, a streamed reply included, at most ``request_timeout``; a reply body at most
``max_reply_bytes`` (an error body is cut at `ERROR_BODY_BYTES`, enough for every error text we
know). Past a bound the exchange ends with `UpstreamError`, which the gateway answers in the
client's API shape: a stalling upstream or a stream that never ends is an error, never a hang.

Bodies are asked for uncompressed (``Accept-Encoding: identity``), so a cap on bytes read is a
cap on what is parsed, and what is passed through is exactly what was read.

What goes upstream is the client's request: its method, path, query, body and end-to-end
headers, plus ``Host``, ``Content-Length``, ``Accept-Encoding: identity`` and the upstream key.
Nothing of an HTTP client's own is added (no ``User-Agent``, no ``Accept``) and nothing is
remembered between requests: there is no cookie jar, so a ``Set-Cookie`` the upstream sent to one
client never reaches the upstream again on another client's request. The request goes to
httpcore's connection pool (the one httpx's transport wraps) as httpcore takes it: httpx's
client (auth flow, redirect loop, event hooks, cookie jar) and its request and response models
cost ~0.25 ms a request here and do nothing the gateway uses. A transport given instead (the
embedded mock model, a test's) gets an httpx request.

Keys. With ``upstream_key`` set, it is the only credential sent upstream (``Authorization:
Bearer``; the client's own ``Authorization`` / ``x-api-key`` are dropped). Without it, the
client's headers go upstream as they came, except when clients present a gateway key: that key
is the gateway's and is never forwarded. The key is held in this object only, never logged.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import httpx

from ctxbudget.errors import ProviderError
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.providers.served import server_url
from ctxbudget.providers.transport import ERROR_BODY_BYTES

__all__ = ["HOP_BY_HOP", "StreamReply", "Upstream", "UpstreamError", "UpstreamReply"]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "accept-encoding",
    }
)
"""Headers that describe one connection or one encoding, never copied from one side to the
other (RFC 9110 section 7.6.1, plus the lengths and encodings httpx and the server set)."""
_HOP_BY_HOP_RAW = frozenset(name.encode() for name in HOP_BY_HOP)
_AUTH_HEADERS = frozenset({"authorization", "x-api-key"})
_TIMEOUTS = (httpx.TimeoutException, httpcore.TimeoutException)
"""A connect, read, write or pool timeout, from httpx (a given transport) or httpcore (the own
pool, whose errors httpx would only rename)."""
_FAILURES = (
    httpx.HTTPError,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ProxyError,
)
"""The upstream cannot be reached, broke the connection, or broke HTTP."""
_URL_CACHE_SIZE = 256
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""Methods whose request states a length even when empty (``Content-Length: 0``, as httpx)."""


class UpstreamError(ProviderError):
    """The upstream could not be reached, stalled, or sent more than a cap: ``kind`` is
    ``"upstream"`` (502), ``"timeout"`` (504) or ``"too_large"`` (502). A `ProviderError`, so a
    summary call that fails this way lets compaction fall back to truncation."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message, status=504 if kind == "timeout" else 502)
        self.kind = kind
        self.status: int = 504 if kind == "timeout" else 502


@dataclass(frozen=True, slots=True)
class UpstreamReply:
    """A whole reply: status, the headers worth passing back, and the body read."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


class StreamReply:
    """A reply whose status and headers have arrived; `chunks` yields its body as it comes,
    within the exchange's deadline and the byte cap. Always `aclose` it (the `Upstream`
    methods that open one say so).

    Made from httpcore's reply (the gateway's own connection pool) or httpx's (a transport
    given to `Upstream`): the status, the header bytes as sent, the body stream and how to
    close it are all it keeps of either."""

    def __init__(
        self,
        status: int,
        raw_headers: Sequence[tuple[bytes, bytes]],
        body: AsyncIterable[bytes],
        close: Callable[[], Awaitable[None]],
        deadline: float,
        max_bytes: int,
    ) -> None:
        self.status = status
        self._raw = [(k.lower(), v) for k, v in raw_headers if k.lower() not in _HOP_BY_HOP_RAW]
        # Latin-1 both ways (Starlette encodes a header so): what is passed back is the bytes
        # the upstream sent, whatever their encoding.
        self.headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in self._raw)
        self.declared_length: int | None = None
        """The body's length as the upstream declared it (``Content-Length``), else None (a
        chunked or close-delimited body: a stream, whose length is known only at its end).
        With identity encoding it is the length of what `chunks` yields, or the exchange
        fails."""
        for name, value in raw_headers:
            if name.lower() == b"content-length" and value.isdigit():
                self.declared_length = int(value)
        self._body = body
        self._close = close
        self._deadline = deadline
        self._max_bytes = max_bytes

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The passed headers as the upstream sent their bytes (names lower-cased), as an ASGI
        server writes them: every one kept, a repeated name (two ``Set-Cookie``) included, in
        the upstream's order."""
        return list(self._raw)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive. Raises `UpstreamError` at the deadline, after a
        silence of ``read_timeout``, on a broken connection, or past the byte cap."""
        received = 0
        iterator = aiter(self._body)
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise _deadline_error()
            try:
                # A timeout scope per read (not one spanning the yields, which would cancel
                # whatever the consumer awaits when it fires).
                async with asyncio.timeout(left):
                    chunk = await anext(iterator)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise _deadline_error() from None
            except _TIMEOUTS:
                raise UpstreamError("timeout", "the upstream went silent mid-reply") from None
            except _FAILURES as exc:
                raise UpstreamError("upstream", f"the upstream's reply broke off ({exc})") from None
            received += len(chunk)
            if received > self._max_bytes:
                raise UpstreamError(
                    "too_large",
                    f"the upstream's reply passed {self._max_bytes:,} bytes; stopped reading",
                )
            yield chunk

    async def read(self, *, cut_errors: bool = True) -> bytes:
        """The whole body (an error body cut at `ERROR_BODY_BYTES` unless ``cut_errors`` is
        false: a passed-through error goes back whole, within the reply cap)."""
        parts: list[bytes] = []
        size = 0
        cut = cut_errors and self.status >= 400
        async for chunk in self.chunks():
            parts.append(chunk)
            size += len(chunk)
            if cut and size >= ERROR_BODY_BYTES:
                break
        body = b"".join(parts)
        return body[:ERROR_BODY_BYTES] if cut else body

    async def aclose(self) -> None:
        """Close the reply (its connection goes back to the pool, or is dropped)."""
        await self._close()


def _deadline_error() -> UpstreamError:
    return UpstreamError("timeout", "the upstream's reply was still arriving at the deadline")


def passed_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``headers`` without the hop-by-hop ones: what passes from one side to the other."""
    return tuple((k, v) for k, v in headers if k.lower() not in HOP_BY_HOP)


@dataclass(frozen=True, slots=True)
class _Target:
    """One upstream URL, parsed once: as httpx and as httpcore take it, and its ``Host``."""

    url: httpx.URL
    core: httpcore.URL
    netloc: bytes
    basic: str | None
    """``Authorization: Basic`` for a user and password in the URL (``http://u:p@host``, as
    httpx's client sends it), else None."""


class Upstream:
    """The upstream at ``config.upstream`` (its base URL, ``/v1`` included; a bare address gets
    ``/v1``), or any httpx ``transport`` (the embedded mock model's ASGI app, a test's)."""

    def __init__(
        self, config: GatewayConfig, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.config = config
        base = "http://mock/v1" if config.is_mock else config.upstream.rstrip("/")
        parts = urlsplit(base)
        if not parts.path:
            # A server's address alone (http://127.0.0.1:8080): its OpenAI API is under /v1
            # on llama.cpp, vLLM, Ollama, LM Studio and the cloud APIs alike.
            base += "/v1"
            parts = urlsplit(base)
        self.base_url = base
        self.server = server_url(base)
        """Where the server's own routes are (`server_url`: the base URL without its ``/v1``)."""
        seconds = config.read_timeout
        self.transport = transport
        """The httpx transport given (the mock model's ASGI app, a test's), else None."""
        self.pool: httpcore.AsyncConnectionPool | None = None
        """The own connection pool to the upstream (when no transport is given)."""
        if transport is None:
            self.pool = httpcore.AsyncConnectionPool(
                # Certificates as httpx checks them, without the environment's paths.
                ssl_context=httpx.create_ssl_context(trust_env=False),
                max_connections=None,
                max_keepalive_connections=64,
                keepalive_expiry=httpx.Limits().keepalive_expiry,
            )
        self._timeouts = httpx.Timeout(seconds, connect=config.connect_timeout).as_dict()
        """httpcore's per-request timeouts: connect, and read/write/pool (a silence)."""
        self._urls: dict[str, _Target] = {}
        """Parsed upstream URLs by their text (parsing one costs ~10 µs; a gateway sends to a
        handful). Bounded: emptied when it reaches `_URL_CACHE_SIZE` (queries vary)."""

    def url(self, path: str) -> str:
        """The upstream URL for a gateway ``path``: ``/v1/...`` under the base URL (whatever
        its own path), anything else (``/props``, ``/api/ps``) under the server (`server`: a
        server behind a path prefix keeps it, as the library's `ps_url` does)."""
        if path == "/v1" or path.startswith("/v1/"):
            return self.base_url + path[3:]
        return self.server + path

    def headers(self, client_headers: Iterable[tuple[str, str]]) -> dict[str, str]:
        """The headers to send upstream for a client request's ``client_headers``."""
        key = self.config.upstream_key
        drop_auth = key is not None or self.config.client_key is not None
        out: dict[str, str] = {}
        for name, value in client_headers:
            lower = name.lower()
            if lower in HOP_BY_HOP or (drop_auth and lower in _AUTH_HEADERS):
                continue
            out[lower] = value
        out["accept-encoding"] = "identity"
        if key is not None:
            out["authorization"] = f"Bearer {key}"
        return out

    async def open(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None = None,
        query: str = "",
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> StreamReply:
        """Send a request and return once the status and headers arrived (the caller reads
        and closes the body). Raises `UpstreamError` when the upstream cannot be reached or is
        silent past ``read_timeout``. ``timeout`` and ``max_bytes`` replace the configured
        ``request_timeout`` and ``max_reply_bytes`` (smaller ones, for window discovery)."""
        seconds = self.config.request_timeout if timeout is None else timeout
        deadline = time.monotonic() + seconds
        target = self._target(self.url(path) + (f"?{query}" if query else ""))
        if target.basic is not None and "authorization" not in headers:
            # The URL's user and password, unless a key is sent (`--upstream-key-env` wins).
            headers = {**headers, "authorization": target.basic}
        cap = self.config.max_reply_bytes if max_bytes is None else max_bytes
        try:
            async with asyncio.timeout(seconds):
                if self.pool is not None:
                    return await self._send_pooled(method, target, headers, content, deadline, cap)
                return await self._send_transport(method, target, headers, content, deadline, cap)
        except TimeoutError:
            raise _deadline_error() from None
        except _TIMEOUTS:
            raise UpstreamError(
                "timeout",
                f"the upstream at {self.shown()} did not answer within "
                f"{self.config.read_timeout:g} s",
            ) from None
        except _FAILURES as exc:
            raise UpstreamError(
                "upstream", f"the upstream at {self.shown()} cannot be reached ({exc})"
            ) from None

    async def _send_pooled(
        self,
        method: str,
        target: _Target,
        headers: Mapping[str, str],
        content: bytes | None,
        deadline: float,
        cap: int,
    ) -> StreamReply:
        """Send on the own pool: httpcore's request made here, as httpx would make it (``Host``
        first, then the given headers, then the length: httpx's ``Request`` adds exactly these
        two) without httpx's models around it (~0.1 ms a request)."""
        head = [(b"host", target.netloc)]
        head += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        if content is not None:
            head.append((b"content-length", str(len(content)).encode()))
        elif method in _BODY_METHODS:
            head.append((b"content-length", b"0"))
        assert self.pool is not None
        request = httpcore.Request(
            method.encode(),
            target.core,
            headers=head,
            content=content or b"",
            extensions={"timeout": self._timeouts},
        )
        response = await self.pool.handle_async_request(request)
        body = response.stream
        assert isinstance(body, AsyncIterable)
        return StreamReply(response.status, response.headers, body, response.aclose, deadline, cap)

    async def _send_transport(
        self,
        method: str,
        target: _Target,
        headers: Mapping[str, str],
        content: bytes | None,
        deadline: float,
        cap: int,
    ) -> StreamReply:
        """Send through the given httpx transport."""
        assert self.transport is not None
        request = httpx.Request(
            method,
            target.url,
            headers=headers,
            content=content,
            extensions={"timeout": self._timeouts},
        )
        response = await self.transport.handle_async_request(request)
        response.request = request
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return StreamReply(
            response.status_code,
            response.headers.raw,
            response.stream,
            response.aclose,
            deadline,
            cap,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None = None,
        query: str = "",
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> UpstreamReply:
        """Send a request and read its whole reply (capped, within the deadline)."""
        reply = await self.open(
            method,
            path,
            headers=headers,
            content=content,
            query=query,
            timeout=timeout,
            max_bytes=max_bytes,
        )
        try:
            body = await reply.read()
        finally:
            await reply.aclose()
        return UpstreamReply(reply.status, reply.headers, body)

    def _target(self, url: str) -> _Target:
        """``url`` parsed, from `_urls` when it was sent to before."""
        target = self._urls.get(url)
        if target is None:
            if len(self._urls) >= _URL_CACHE_SIZE:
                self._urls.clear()
            parsed = httpx.URL(url)
            core = httpcore.URL(
                scheme=parsed.raw_scheme,
                host=parsed.raw_host,
                port=parsed.port,
                target=parsed.raw_path,
            )
            basic = None
            if parsed.username or parsed.password:
                pair = f"{parsed.username}:{parsed.password}".encode()
                basic = "Basic " + base64.b64encode(pair).decode("ascii")
            target = self._urls[url] = _Target(parsed, core, parsed.netloc, basic)
        return target

    def shown(self) -> str:
        """The upstream's address for messages (no credentials, no query)."""
        from ctxbudget.providers.endpoint import public_url

        return "the embedded mock model" if self.config.is_mock else public_url(self.base_url)

    async def aclose(self) -> None:
        """Close the pool (or the transport) and its connections."""
        if self.pool is not None:
            await self.pool.aclose()
        if self.transport is not None:
            await self.transport.aclose()
