"""The gateway's own HTTP hop, byte for byte: what a passed-through request sends upstream
(the client's request, nothing of an HTTP client's own, no cookie jar) and what the client gets
back (status, every header, the body; a small reply whole with its length, a stream relayed;
the reply cap and the read timeout on either)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from starlette.types import Message, Receive, Scope, Send
from tests.gateway.helpers import config, loopback

from ctxbudget.gateway.app import WHOLE_REPLY_BYTES, create_app
from ctxbudget.providers.transport import ERROR_BODY_BYTES

Headers = list[tuple[bytes, bytes]]


class Recorded:
    """An upstream that records each request (method, path, query, raw headers, body) and
    answers each with the next of ``replies``: (status, raw headers, body chunks)."""

    def __init__(self, replies: Sequence[tuple[int, Headers, list[bytes]]]) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, str, bytes, Headers, bytes]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.requests.append(
            (scope["method"], scope["path"], scope["query_string"], list(scope["headers"]), body)
        )
        status, headers, chunks = self.replies.pop(0)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for i, chunk in enumerate(chunks):
            more = i < len(chunks) - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
        if not chunks:
            await send({"type": "http.response.body", "body": b""})


async def call(
    app: Any, method: str, path: str, headers: Headers, body: bytes = b"", query: bytes = b""
) -> tuple[int, Headers, bytes]:
    """One request to the ASGI ``app`` exactly as given (no HTTP client adds a header)."""
    sent: list[Message] = []
    given = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if given:
            return given.pop(0)
        await asyncio.Event().wait()  # no disconnect while the reply is written
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("gateway.test", 80),
    }
    await app(scope, receive, send)
    start = sent[0]
    assert start["type"] == "http.response.start"
    return start["status"], list(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def _gateway(tmp_path: Path, upstream_app: Any, **settings: Any) -> Any:
    transport = None if "upstream" in settings else httpx.ASGITransport(app=upstream_app)
    return create_app(config(tmp_path, window=4096, **settings), transport=transport)


CLIENT_HEADERS: Headers = [
    (b"host", b"gateway.test"),
    (b"content-type", b"application/json"),
    (b"x-custom", b"kept"),
    (b"content-length", b"13"),
    (b"connection", b"keep-alive"),
    (b"accept-encoding", b"gzip"),
]


def test_what_goes_upstream_is_the_clients_request_and_nothing_more(tmp_path: Path) -> None:
    upstream = Recorded([(200, [(b"content-type", b"application/json")], [b"{}"])])
    app = _gateway(tmp_path, upstream)

    async def go() -> None:
        await call(app, "POST", "/v1/embeddings", CLIENT_HEADERS, b'{"input": 1}\n', b"a=1&b=2")
        await app.state.gateway.aclose()

    asyncio.run(go())
    [(method, path, query, headers, body)] = upstream.requests
    assert (method, path, query, body) == ("POST", "/v1/embeddings", b"a=1&b=2", b'{"input": 1}\n')
    # The client's end-to-end headers, the upstream's host, the length, identity: no
    # User-Agent, Accept or Connection of an HTTP client's own.
    assert sorted(headers) == [
        (b"accept-encoding", b"identity"),
        (b"content-length", b"13"),
        (b"content-type", b"application/json"),
        (b"host", b"upstream.test"),
        (b"x-custom", b"kept"),
    ]


def test_no_cookie_of_one_reply_is_sent_with_a_later_request(tmp_path: Path) -> None:
    cookie = [(b"set-cookie", b"lb=replica-2; Path=/"), (b"content-type", b"application/json")]
    upstream = Recorded([(200, cookie, [b"{}"]), (200, [], [b"{}"])])
    app = _gateway(tmp_path, upstream)
    plain: Headers = [(b"host", b"gateway.test")]

    async def go() -> Headers:
        _, first, _ = await call(app, "GET", "/v1/models", plain)
        await call(app, "GET", "/v1/models", plain)  # another client, no cookie of its own
        await app.state.gateway.aclose()
        return first

    first = asyncio.run(go())
    assert (b"set-cookie", b"lb=replica-2; Path=/") in first  # the client that got it sees it
    second_headers = dict(upstream.requests[1][3])
    assert b"cookie" not in second_headers


def test_a_small_reply_goes_back_whole_with_its_length_and_every_header(tmp_path: Path) -> None:
    body = b'{"object": "list", "data": []}'
    error = b'{"error": "' + b"x" * (ERROR_BODY_BYTES * 2) + b'"}'
    reply: Headers = [
        (b"content-type", b"application/json"),
        (b"set-cookie", b"a=1"),
        (b"x-request-id", b"req-7"),
        (b"set-cookie", b"b=2"),
        (b"x-note", "café".encode()),  # UTF-8 bytes in a header: passed as they are
        (b"content-length", str(len(body)).encode()),
    ]
    upstream = Recorded(
        [
            (203, reply, [body[:10], body[10:]]),
            (404, [(b"content-length", str(len(error)).encode())], [error]),
        ]
    )
    app = _gateway(tmp_path, upstream)

    async def go() -> list[tuple[int, Headers, bytes]]:
        host: Headers = [(b"host", b"gateway.test")]
        out = [await call(app, "GET", "/v1/models", host), await call(app, "GET", "/v1/x", host)]
        await app.state.gateway.aclose()
        return out

    (status, headers, got), (missing, missing_headers, missing_body) = asyncio.run(go())
    assert (status, got) == (203, body)
    assert headers == [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", b"application/json"),
        (b"set-cookie", b"a=1"),
        (b"x-request-id", b"req-7"),
        (b"set-cookie", b"b=2"),
        (b"x-note", "café".encode()),
    ]
    # An error body goes back as it came (not cut as the gateway cuts what it classifies).
    assert (missing, missing_body) == (404, error)
    assert (b"content-length", str(len(error)).encode()) in missing_headers


def test_a_stream_or_a_long_reply_is_relayed_as_it_comes(tmp_path: Path) -> None:
    events = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]
    long = b"y" * (WHOLE_REPLY_BYTES + 1)
    upstream = Recorded(
        [
            (200, [(b"content-type", b"text/event-stream")], events),
            (200, [(b"content-length", str(len(long)).encode())], [long]),
        ]
    )
    app = _gateway(tmp_path, upstream)
    host: Headers = [(b"host", b"gateway.test")]

    async def go() -> list[tuple[int, Headers, bytes]]:
        out = [await call(app, "GET", "/v1/events", host), await call(app, "GET", "/v1/big", host)]
        await app.state.gateway.aclose()
        return out

    (status, headers, body), (_, long_headers, long_body) = asyncio.run(go())
    assert (status, body) == (200, b"".join(events))
    assert headers == [(b"content-type", b"text/event-stream")]  # no length: relayed
    assert long_body == long and long_headers == []


def test_a_small_reply_past_the_reply_cap_is_an_error_not_a_cut_body(tmp_path: Path) -> None:
    body = b"z" * 5000
    upstream = Recorded([(200, [(b"content-length", b"5000")], [body])])
    app = _gateway(tmp_path, upstream, max_reply_bytes=1000)

    async def go() -> tuple[int, Headers, bytes]:
        got = await call(app, "GET", "/v1/models", [(b"host", b"gateway.test")])
        await app.state.gateway.aclose()
        return got

    status, _, got = asyncio.run(go())
    assert status == 502 and b"1,000 bytes" in got


def test_a_small_reply_that_stalls_mid_body_is_a_timeout(tmp_path: Path) -> None:
    async def stalling(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-length", b"100")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"a" * 10, "more_body": True})
        await asyncio.sleep(30)

    with loopback(stalling) as url:
        app = _gateway(tmp_path, None, upstream=f"{url}/v1", read_timeout=0.5)

        async def go() -> tuple[int, Headers, bytes]:
            got = await call(app, "GET", "/v1/models", [(b"host", b"gateway.test")])
            await app.state.gateway.aclose()
            return got

        status, _, got = asyncio.run(asyncio.wait_for(go(), 10))
    assert status == 504 and b"silent" in got


def test_the_chat_routes_reply_headers_keep_their_bytes(tmp_path: Path) -> None:
    completion = (
        b'{"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, '
        b'"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}], '
        b'"usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}'
    )
    reply = [
        (b"content-type", b"application/json"),
        (b"x-note", "café".encode()),
        (b"set-cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
        (b"x-ctxbudget-tokens", b"1"),  # the gateway's own names are the gateway's to say
    ]
    upstream = Recorded([(200, reply, [completion])])
    app = _gateway(tmp_path, upstream)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hello"}]}'
    head: Headers = [(b"host", b"gateway.test"), (b"content-type", b"application/json")]

    async def go() -> tuple[int, Headers, bytes]:
        got = await call(app, "POST", "/v1/chat/completions", head, body)
        await app.state.gateway.aclose()
        return got

    status, headers, got = asyncio.run(go())
    assert (status, got) == (200, completion)
    assert (b"x-note", "café".encode()) in headers
    # a repeated header comes back as often as it was sent, in its order
    assert [v for k, v in headers if k == b"set-cookie"] == [b"a=1", b"b=2"]
    tokens = [v for k, v in headers if k == b"x-ctxbudget-tokens"]
    assert len(tokens) == 1 and tokens != [b"1"]
    assert len([k for k, _ in headers if k == b"content-length"]) == 1


def test_a_user_and_password_in_the_upstream_url_are_sent_as_basic_auth(tmp_path: Path) -> None:
    # httpx's client sent them; the gateway's own hop must too (a proxy behind basic auth),
    # and never in the Host header. A configured upstream key is the one credential sent.
    import base64

    def upstream_app() -> Recorded:
        return Recorded([(200, [(b"content-type", b"application/json")], [b"{}"])])

    expected = b"Basic " + base64.b64encode(b"me:p@ss")
    plain: Headers = [(b"host", b"gateway.test")]

    async def go(app: Any) -> None:
        await call(app, "GET", "/v1/models", plain)
        await app.state.gateway.aclose()

    via_transport = upstream_app()
    settings = {"upstream": "http://me:p%40ss@upstream.test/v1", "window": 4096}
    app = create_app(config(tmp_path, **settings), transport=httpx.ASGITransport(app=via_transport))
    asyncio.run(go(app))
    with loopback(pooled := upstream_app()) as url:
        host = url.split("://", 1)[1]
        asyncio.run(go(_gateway(tmp_path, pooled, upstream=f"http://me:p%40ss@{host}/v1")))
    for recorded in (via_transport, pooled):
        [(_, _, _, headers, _)] = recorded.requests
        assert (b"authorization", expected) in headers
        assert not any(b"me" in v for k, v in headers if k == b"host")
    keyed = upstream_app()
    app = create_app(
        config(tmp_path, upstream_key="sk-up", **settings),
        transport=httpx.ASGITransport(app=keyed),
    )
    asyncio.run(go(app))
    [(_, _, _, headers, _)] = keyed.requests
    assert [v for k, v in headers if k == b"authorization"] == [b"Bearer sk-up"]
