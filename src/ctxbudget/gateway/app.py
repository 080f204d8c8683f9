"""The gateway as an ASGI application: `create_app(config) -> Starlette`.

Routes:

- ``POST`` on each `WireApi`'s path (``/v1/chat/completions``...): guarded. The body is read
  under a size cap, parsed with a depth cap, read by the API module, matched to its
  conversation, and sent through the conversation's `BudgetSession.arun` (the one budget loop:
  floor, rule, compaction, overflow recovery, retry once); the reply is passed back as it came,
  streamed event by event, with the ``x-ctxbudget-*`` headers saying what was done.
- ``POST /v1/messages/count_tokens``: the count of what would be forwarded (Anthropic's).
- ``GET /ctxbudget/status``: the conversations as JSON; ``GET /`` its page, ``GET /metrics``,
  ``GET /healthz`` (`ctxbudget.gateway.lifecycle.ops_routes`).
- Every other path and method: passed through to the upstream unchanged (body capped).

Errors leave in the client's API's own shape (`WireApi.error`); the upstream's own errors that
are not overflows are passed back as they came. With a client key configured every route asks
for it (``Authorization: Bearer KEY`` or ``x-api-key: KEY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import hmac
import logging
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxbudget.agent.budget_session import Reply
from ctxbudget.agent.session_store import SqliteSessionStore, open_store
from ctxbudget.budget.floor import one_line
from ctxbudget.budget.reply_room import clamp_max_tokens
from ctxbudget.errors import (
    CompactionError,
    ConfigError,
    ContextOverflowError,
    CtxbudgetError,
    InputError,
    PromptFloorExceeded,
)
from ctxbudget.gateway.api import JsonBody, Parsed, WireApi, json_object, merge_usage
from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.conversations import Conversation, Conversations
from ctxbudget.gateway.depth import DepthMemo, ItemKeys
from ctxbudget.gateway.discover import ServedWindows, discover_window, missing_window
from ctxbudget.gateway.lifecycle import Health, mount_ops, ops_routes
from ctxbudget.gateway.logs import RequestLog, log_request
from ctxbudget.gateway.messages_api import MESSAGES, count_tokens
from ctxbudget.gateway.metrics import GatewayMetrics
from ctxbudget.gateway.responses import RESPONSES
from ctxbudget.gateway.sse import SseParser
from ctxbudget.gateway.upstream import StreamReply, Upstream, UpstreamError
from ctxbudget.messages.model import Request
from ctxbudget.messages.usage import Usage
from ctxbudget.providers.endpoint import provider_name_for
from ctxbudget.providers.overflow import classify_error, server_error_text

if TYPE_CHECKING:
    from ctxbudget.counting.result import RequestCount

__all__ = ["DEFAULT_APIS", "Gateway", "create_app"]

log = logging.getLogger("ctxbudget.gateway")

DEFAULT_APIS: tuple[WireApi, ...] = (CHAT, RESPONSES, MESSAGES)
"""The wire APIs served when `create_app` is given none: Chat Completions (Pi, OpenCode),
Responses (Codex), Anthropic Messages (Claude Code)."""
STATUS_PATH = "/ctxbudget/status"
STATUS_SETTLE_S = 1.0
"""The longest a status read waits for the work after replies that just ended."""
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
WHOLE_REPLY_BYTES = 1 << 20
"""A passed-through reply that declares at most this many bytes is read whole and sent back with
its length; a longer one, or one of unknown length (an event stream), is relayed as it comes."""
CLAMPED_HEADER = "x-ctxbudget-max-tokens-clamped"
_MOCK_WINDOW = 8192
"""The embedded mock model's window when ``--window`` is not given."""


class _Refused(Exception):
    """A request answered with an error before it reaches the upstream."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclass(slots=True)
class _Forwarded:
    """What one send to the upstream gave: the request sent, its count, and the reply (read
    whole, or open as a stream)."""

    sent: Request
    tokens: int
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""
    json: JsonBody | None = None
    stream: StreamReply | None = None
    strip_usage: bool = False
    clamped: int | None = None
    """The reply limit forwarded in place of the client's larger one (`clamp_max_tokens`)."""


class Gateway:
    """The gateway's parts: upstream client, state store, conversations, window."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        apis: Sequence[WireApi] = DEFAULT_APIS,
        transport: httpx.AsyncBaseTransport | None = None,
        store: Any = None,
    ) -> None:
        self.config = config
        self.apis = {api.path: api for api in apis}
        if transport is None and config.is_mock:
            transport = _mock_transport(config)
        self.upstream = Upstream(config, transport)
        if store is None:
            store = SqliteSessionStore() if config.state is None else open_store(str(config.state))
        self.store = store
        self.window: int | None = config.window or (_MOCK_WINDOW if config.is_mock else None)
        self.window_source = "--window" if config.window else None
        self._conversations: Conversations | None = None
        self._ready = asyncio.Lock()
        self.summary_calls = 0
        """Summary requests sent upstream so far (tests and the status page read it)."""
        self.metrics = GatewayMetrics(
            conversations=lambda: 0 if self._conversations is None else len(self._conversations)
        )
        self.health = Health()
        self.depths = DepthMemo()
        """The depths of request items seen before (the body's depth check)."""

    async def conversations(self) -> Conversations:
        """The conversations, once the window is known (discovered on first use)."""
        if self._conversations is not None:
            return self._conversations
        async with self._ready:
            if self._conversations is None:
                window = self.window
                if window is None:
                    headers = self.upstream.headers(())
                    found = await discover_window(self.upstream, headers)
                    if found is None:
                        raise ConfigError(await missing_window(self.upstream, headers))
                    window, self.window_source = found.window, found.source
                self.window = window
                self._conversations = Conversations(
                    self.config,
                    self.store,
                    window=window,
                    provider_name=None
                    if self.config.is_mock
                    else provider_name_for(self.upstream.base_url),
                    base_url=None if self.config.is_mock else self.upstream.shown(),
                    on_event=self.metrics.on_session_event,
                    served_windows=None if self.config.is_mock else ServedWindows(self.upstream),
                )
                self.metrics.set_upstream_window(window)
        return self._conversations

    async def aclose(self) -> None:
        """Close the archives, the store and the upstream client (once every reply's state is
        saved)."""
        if self._conversations is not None:
            await self._conversations.settled()
            self._conversations.close()
        await self.upstream.aclose()
        close = getattr(self.store, "close", None)
        if callable(close):
            close()

    # -- the guarded path --------------------------------------------------------------------------

    async def guarded(self, http: HttpRequest, api: WireApi) -> Response:
        """``POST`` on an API's path."""
        timer = _Tracked(self, api, http.url.path)
        try:
            self.check_key(http)
            raw = await self.read_body(http)
            body, keys = self.read_json(raw)
            try:
                parsed = api.parse(body, keys)
            except InputError as exc:
                raise _Refused(400, "invalid_request", one_line(str(exc))) from None
            timer.model, timer.stream = parsed.model, parsed.stream
            if parsed.passthrough is not None:
                passed = await self.forward(http, raw, passthrough=parsed.passthrough)
                timer.done("passthrough", passed.status_code)
                return passed
            conversations = await self.conversations()
            # Once a request, and only its new items hashed (`ChainMemo`).
            chain = conversations.chains.chain(api.name, parsed.head, parsed.translated.items, keys)
            # Its refresh from the shared store runs in `_run`'s one worker-thread hop.
            conversation = await conversations.find(api.name, parsed, chain, refresh=False)
            return await self._run(
                http, api, raw, body, parsed, conversations, conversation, timer, chain
            )
        except _Refused as exc:
            timer.done("client_error", exc.status)
            return _error(api, exc.status, exc.kind, str(exc))
        except PromptFloorExceeded as exc:
            timer.done("floor", 400)
            return _error(api, 400, "context_length_exceeded", one_line(str(exc)))
        except CompactionError as exc:
            timer.done("overflow", 400)
            return _error(api, 400, "context_length_exceeded", one_line(str(exc)))
        except UpstreamError as exc:
            timer.done("upstream_error", exc.status)
            return _error(api, exc.status, exc.kind, str(exc))
        except InputError as exc:
            timer.done("client_error", 400)
            return _error(api, 400, "invalid_request", one_line(str(exc)))
        except CtxbudgetError as exc:
            timer.done("upstream_error", 500)
            log.warning("gateway error: %s", one_line(str(exc)))
            return _error(api, 500, "upstream", one_line(str(exc)))

    async def _run(
        self,
        http: HttpRequest,
        api: WireApi,
        raw: bytes,
        body: JsonBody,
        parsed: Parsed,
        conversations: Conversations,
        conversation: Conversation,
        timer: _Tracked,
        chain: list[bytes],
    ) -> Response:
        session = conversation.session
        timer.conversation, timer.window = conversation.id, session.window
        messages = conversations.attach_usage(conversation, parsed.request.messages)
        asked = parsed.request.with_messages(messages)
        headers = self.upstream.headers(http.headers.items())
        headers["content-type"] = "application/json"
        model = self.config.summary_model or parsed.model or ""
        summarizer = _UpstreamSummarizer(self, api, model, headers, lambda: session.window)

        def ready() -> tuple[Request, Request, RequestCount, int | None]:
            # The blocking work before the send, in one worker-thread hop (each hop is a thread
            # wake-up and a return to the loop, ~0.2 ms): a newer compaction another instance
            # saved taken over (`Conversations.refresh`), the session's decision (floor, rule,
            # compaction: `BudgetSession.prepare`, what `arun` runs first), the count of what
            # it decided to send (the one `_send` needs) and, when that is a compacted view,
            # the count of the list as the client sent it (the ``received`` tokens).
            conversations.refresh(conversation)
            request = asked
            if request.max_output_tokens is None:  # the window's reserve, after the refresh
                request = dataclasses.replace(request, max_output_tokens=session.max_output_tokens)
            sent = session.prepare(request, summarizer=summarizer, new_turn=True)
            counted = session.counter.count(sent)
            client = None
            if sent.messages is not request.messages:
                client = int(session.counter.count(request).total)
            return request, sent, counted, client

        request, prepared, counted, client_tokens = await asyncio.to_thread(ready)
        timer.window = session.window

        async def send(sent: Request) -> _Forwarded:
            # A request the session sends again after an overflow is counted anew.
            tokens = int(counted.total) if sent is prepared else None
            return await self._send(
                http, api, raw, body, parsed, request, sent, headers, session, timer, tokens
            )

        def read_reply(result: _Forwarded) -> Reply | None:
            if result.json is None:
                return None
            usage = api.usage(result.json)
            stop = api.stop_reason(result.json)
            return None if usage is None or stop is None else _reply(result, usage, stop)

        # A prompt the upstream silently truncated (Ollama) is compacted and sent again now:
        # the reply to the truncated one never reaches the client.
        result = await session.asend(
            prepared,
            send,
            summarizer=summarizer,
            reply=read_reply,
            retry_truncated=True,
            counted=counted,
        )
        conversations.sent(conversation, parsed, api.name, chain)
        conversation.last_tokens = result.tokens
        out_headers = {
            "x-ctxbudget-tokens": str(result.tokens),
            "x-ctxbudget-window": str(session.window),
            "x-ctxbudget-compacted": "0" if result.sent.messages is request.messages else "1",
            "x-ctxbudget-conversation": conversation.id,
        }
        if result.clamped is not None:
            out_headers[CLAMPED_HEADER] = str(result.clamped)
        compacted = out_headers["x-ctxbudget-compacted"] == "1"
        received = result.tokens  # the list as the client sent it: counted again if changed
        if compacted and client_tokens is not None:
            received = client_tokens  # counted before the send, in the same hop
        elif compacted:  # only the retry after an overflow compacted it
            received = await asyncio.to_thread(lambda: session.counter.count(request).total)
        outcome = "compacted" if compacted else "ok"
        if result.stream is not None:
            streamed = StreamingResponse(
                self._stream(
                    api,
                    result,
                    conversations,
                    conversation,
                    timer,
                    (outcome, int(received), result.tokens, compacted),
                ),
                status_code=result.status,
                headers=out_headers,
            )
            return _with_upstream_headers(streamed, result.headers)
        if result.json is not None and result.status < 400:
            usage = api.usage(result.json)
            if usage is not None:
                conversation.memory.usage = session.record(usage, prompt_tokens=result.tokens)
        # Fsync and state save after the reply, off its path; the conversation's next request
        # waits for them (`Conversations.find`).
        await conversations.after_reply(conversation)
        timer.done(
            outcome if result.status < 400 else "upstream_error",
            result.status,
            received=int(received),
            forwarded=result.tokens,
            compacted=compacted,
        )
        whole = Response(result.body, status_code=result.status, headers=out_headers)
        return _with_upstream_headers(whole, result.headers)

    async def _send(
        self,
        http: HttpRequest,
        api: WireApi,
        raw: bytes,
        body: JsonBody,
        parsed: Parsed,
        request: Request,
        sent: Request,
        headers: dict[str, str],
        session: Any,
        timer: _Tracked,
        tokens: int | None = None,
    ) -> _Forwarded:
        """Send ``sent`` upstream (to the path and query the client used: ``?beta=true``
        stays); an overflow is raised as `ContextOverflowError` (the session recovers and retries
        once), any other error reply is returned to be passed back. ``tokens``: the count of
        ``sent`` when the caller made it already (else it is counted here)."""
        if tokens is None:
            count = await asyncio.to_thread(session.counter.count, sent)
            tokens = int(count.total)
        # A reply limit larger than the window leaves is lowered to it (Claude Code asks for
        # 128,000 of an 8K window); the session then reads a reply stopped there as asked.
        asked = parsed.request.max_output_tokens
        limit = clamp_max_tokens(
            asked, window=session.window, prompt_tokens=tokens, reserve=session.max_output_tokens
        )
        clamped = limit if limit is not None and asked is not None and limit < asked else None
        if clamped is not None:
            sent = dataclasses.replace(sent, max_output_tokens=clamped)
        if sent.messages is request.messages and clamped is None:
            forward = body  # nothing changed
        else:
            forward = api.forward_body(body, parsed, sent, clamped)
        strip = False
        if parsed.stream:
            forward, strip = api.prepare_stream(forward)
        # The body as received when nothing changed: no second serialisation.
        content = raw if forward is body else orjson.dumps(forward)
        if self.config.log_messages:
            timer.messages = forward.get("messages", forward.get("input"))
        timer.begin_upstream()  # ends when the reply is read (a stream: at its end)
        reply = await self.upstream.open(
            "POST", http.url.path, headers=headers, content=content, query=http.url.query
        )
        if reply.status >= 400:
            try:
                text = await reply.read()
            finally:
                await reply.aclose()
                timer.end_upstream()
            found = _overflow(reply.status, text)
            if found is not None:
                raise found
            return _Forwarded(sent, tokens, reply.status, reply.headers, body=text, clamped=clamped)
        if parsed.stream:
            return _Forwarded(
                sent,
                tokens,
                reply.status,
                reply.headers,
                stream=reply,
                strip_usage=strip,
                clamped=clamped,
            )
        try:
            data = await reply.read()
        finally:
            await reply.aclose()
            timer.end_upstream()
        return _Forwarded(
            sent,
            tokens,
            reply.status,
            reply.headers,
            body=data,
            json=json_object(data),
            clamped=clamped,
        )

    async def _stream(
        self,
        api: WireApi,
        result: _Forwarded,
        conversations: Conversations,
        conversation: Conversation,
        timer: _Tracked,
        counted: tuple[str, int, int, bool],
    ) -> AsyncIterator[bytes]:
        """The upstream's events as they arrive, less the usage chunk the gateway asked for;
        the usage is recorded when the stream ends (also when the client went away)."""
        assert result.stream is not None
        parser = SseParser()
        usage: Usage | None = None
        stop: str | None = None
        try:
            async for chunk in result.stream.chunks():
                out: list[bytes] = []
                for event in parser.feed(chunk):
                    if event.data is not None:
                        usage = merge_usage(usage, api.stream_usage(event.name, event.data))
                        stop = api.stream_stop_reason(event.name, event.data) or stop
                        if result.strip_usage and api.is_extra_usage_event(event.name, event.data):
                            continue
                    out.append(event.raw)
                if out:
                    yield b"".join(out)
            rest = parser.flush()
            if rest:
                yield rest
        except UpstreamError as exc:
            # The status line is gone: the error travels as the stream's last event.
            _, error = api.error(exc.status, exc.kind, str(exc))
            yield b"data: " + orjson.dumps(error) + b"\n\n"
        finally:
            with anyio.CancelScope(shield=True):
                await result.stream.aclose()
                timer.end_upstream()
                outcome, received, forwarded, compacted = counted
                timer.done(
                    outcome,
                    result.status,
                    received=received,
                    forwarded=forwarded,
                    compacted=compacted,
                )
                # After the last byte, off the reply's path; the next request waits for it.
                await conversations.after_reply(
                    conversation,
                    lambda: self._streamed(conversations, conversation, result, usage, stop),
                )

    def _streamed(
        self,
        conversations: Conversations,
        conversation: Conversation,
        result: _Forwarded,
        usage: Usage | None,
        stop: str | None,
    ) -> None:
        """After a stream: record its usage, run the silent-overflow checks `arun` runs on a
        whole reply (a window they find is adopted; the next request compacts under it), save."""
        session = conversation.session
        if usage is not None:
            recorded = session.record(usage, prompt_tokens=conversation.last_tokens)
            conversation.memory.usage = recorded
            sent = result.sent
            if stop is not None and session.cut(sent, _reply(result, usage, stop)) is None:
                session.check_truncation(sent, usage)
        conversations.save(conversation)

    # -- request checks ------------------------------------------------------------------------

    def check_key(self, http: HttpRequest) -> None:
        """Refuse a request without the client key (when one is configured)."""
        key = self.config.client_key
        if key is None:
            return
        given = http.headers.get("x-api-key") or ""
        auth = http.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if not hmac.compare_digest(given.encode(), key.encode()):
            raise _Refused(401, "authentication", "missing or wrong API key for this gateway")

    async def read_body(self, http: HttpRequest) -> bytes:
        """The request body, refused past ``max_body_bytes`` without reading the rest."""
        cap = self.config.max_body_bytes
        declared = http.headers.get("content-length")
        too_large = _Refused(
            413, "too_large", f"request body over the gateway's cap of {cap:,} bytes"
        )
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise too_large
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in http.stream():
                size += len(chunk)
                if size > cap:
                    raise too_large
                parts.append(chunk)
        except ClientDisconnect:
            raise _Refused(400, "invalid_request", "the client went away mid-body") from None
        return b"".join(parts)

    def parse_json(self, raw: bytes) -> JsonBody:
        """The body as a JSON object, refused when it is not JSON or nests too deep."""
        return self.read_json(raw)[0]

    def read_json(self, raw: bytes) -> tuple[JsonBody, ItemKeys]:
        """The body as a JSON object, refused when it is not JSON or nests too deep, and the
        canonical JSON of the items of its top-level lists (`ItemKeys`, made by the depth check
        and reused by the API's item memo and the conversation digests)."""
        depth = self.config.max_json_depth
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            if "depth" in str(exc).lower() or "recursion" in str(exc).lower():
                raise _Refused(400, "invalid_request", _too_deep(depth)) from None
            raise _Refused(400, "invalid_request", f"request body is not JSON ({exc})") from None
        # Items measured on an earlier request are not walked again (`DepthMemo` says why that
        # is safe); nothing else reads the body before this check.
        found, keys = self.depths.body_depth(value, depth)
        if found > depth:
            raise _Refused(400, "invalid_request", _too_deep(depth))
        if not isinstance(value, dict):
            raise _Refused(400, "invalid_request", "request body must be a JSON object")
        return value, keys

    # -- everything else -----------------------------------------------------------------------

    async def forward(
        self, http: HttpRequest, raw: bytes | None = None, *, passthrough: str | None = None
    ) -> Response:
        """``http`` sent upstream as it came; the reply streamed back as it comes."""
        try:
            self.check_key(http)
            if raw is None:
                raw = await self.read_body(http)
            reply = await self.upstream.open(
                http.method,
                http.url.path,
                headers=self.upstream.headers(http.headers.items()),
                content=raw or None,
                query=http.url.query,
            )
        except _Refused as exc:
            return _error(CHAT, exc.status, exc.kind, str(exc))
        except UpstreamError as exc:
            return _error(CHAT, exc.status, exc.kind, str(exc))
        headers = reply.raw_headers()
        if passthrough is not None:
            headers.append((b"x-ctxbudget-passthrough", passthrough.encode("latin-1")))
        length = reply.declared_length
        if length is not None and length <= WHOLE_REPLY_BYTES and http.method != "HEAD":
            # A small reply of known length (a non-streamed completion, a model list, an
            # error) goes back whole, with its length: one write to the client where a relay
            # writes a chunk header, the body and a last chunk, with a task that watches for a
            # disconnect started and cancelled around them (~0.3 ms a request).
            try:
                body = await reply.read(cut_errors=False)
            except UpstreamError as exc:
                return _error(CHAT, exc.status, exc.kind, str(exc))
            finally:
                await reply.aclose()
            whole = Response(body, status_code=reply.status)
            whole.raw_headers.extend(headers)
            return whole
        relay = StreamingResponse(_passed(reply), status_code=reply.status, background=None)
        relay.raw_headers.extend(headers)
        return relay

    async def status(self, http: HttpRequest) -> Response:
        """``GET /ctxbudget/status``: the upstream, the window and the live conversations."""
        try:
            self.check_key(http)
        except _Refused as exc:
            return _error(CHAT, exc.status, exc.kind, str(exc))
        conversations = self._conversations
        if conversations is not None:
            # A reply's numbers (its usage, a window a truncation showed) are recorded just after
            # it ends (`Conversations.after_reply`): a status read waits for that work, briefly,
            # so it shows what the conversation's next request will see.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conversations.settled(), STATUS_SETTLE_S)
        return JSONResponse(
            {
                "upstream": self.upstream.shown(),
                "window": self.window,
                "window_source": self.window_source,
                "summary_calls": self.summary_calls,
                "conversations": [] if conversations is None else conversations.status(),
            }
        )

    async def count_tokens(self, http: HttpRequest) -> Response:
        """``POST /v1/messages/count_tokens``: Anthropic's count of the request that would be
        forwarded (a stored compaction in place of the prefix it replaced), counted as a real
        request is. Nothing is sent upstream and no conversation is started."""
        try:
            self.check_key(http)
            body = self.parse_json(await self.read_body(http))
            try:
                parsed = MESSAGES.parse(body)
            except InputError as exc:
                raise _Refused(400, "invalid_request", one_line(str(exc))) from None
            conversations = await self.conversations()
            counter, request = await conversations.view(MESSAGES.name, parsed)
            answer = await asyncio.to_thread(
                count_tokens, parsed, lambda _: int(counter.count(request).total)
            )
        except _Refused as exc:
            return _error(MESSAGES, exc.status, exc.kind, str(exc))
        except InputError as exc:
            return _error(MESSAGES, 400, "invalid_request", one_line(str(exc)))
        except CtxbudgetError as exc:
            return _error(MESSAGES, 500, "upstream", one_line(str(exc)))
        return Response(orjson.dumps(answer), media_type="application/json")


class _Tracked:
    """One guarded request's metrics (`RequestTimer`) and its log line (`RequestLog`): the
    upstream time between `begin_upstream` and `end_upstream`, then `done`, once."""

    def __init__(self, gateway: Gateway, api: WireApi, path: str) -> None:
        self.timer = gateway.metrics.timer(api.name)
        self.api = api.name
        self.path = path
        self.model: str | None = None
        self.stream = False
        self.conversation: str | None = None
        self.window: int | None = None
        self.messages: Any = None
        """The conversation as forwarded (only with ``log_messages``)."""

    def begin_upstream(self) -> None:
        """Upstream time starts (the forwarded request is sent)."""
        self.timer.begin_upstream()

    def end_upstream(self) -> None:
        """Upstream time ends (the reply was read, or the stream ended)."""
        self.timer.end_upstream()

    def done(
        self,
        outcome: str,
        status: int,
        *,
        received: int | None = None,
        forwarded: int | None = None,
        compacted: bool = False,
    ) -> None:
        """The request ended: counted in the metrics and logged (the first call only)."""
        if self.timer.timing is not None:
            return
        timing = self.timer.done(outcome, received=received, forwarded=forwarded)
        entry = RequestLog(
            api=self.api,
            path=self.path,
            status=status,
            outcome=outcome,
            conversation=self.conversation,
            model=self.model,
            stream=self.stream,
            tokens_received=received,
            tokens_forwarded=forwarded,
            window=self.window,
            compacted=compacted,
            upstream_ms=round(timing.upstream_ms, 3),
            overhead_ms=round(timing.overhead_ms, 3),
            duration_ms=round(timing.duration_ms, 3),
        )
        messages = self.messages if isinstance(self.messages, list) else None
        log_request(entry, messages=messages)


def _reply(result: _Forwarded, usage: Usage, stop: str) -> Reply:
    """The reply as the session reads it. One stopped at the limit the gateway lowered
    (`_Forwarded.clamped`) stopped where it was asked to, not at a smaller window's end."""
    if result.clamped is not None and stop == "length" and usage.output_tokens >= result.clamped:
        stop = "max_tokens_clamped"
    return Reply(usage, stop)


async def _passed(reply: StreamReply) -> AsyncIterator[bytes]:
    """A passed-through body: chunks as they come; an error mid-way ends it."""
    try:
        async for chunk in reply.chunks():
            yield chunk
    except UpstreamError as exc:
        log.warning("passthrough ended early: %s", exc)
    finally:
        with anyio.CancelScope(shield=True):
            await reply.aclose()


class _UpstreamSummarizer:
    """Summaries written by the upstream model through the client's own API (the model the
    request names, or ``--summary-model``). Called from compaction's worker thread; the request
    runs on the gateway's event loop."""

    def __init__(
        self,
        gateway: Gateway,
        api: WireApi,
        model: str,
        headers: dict[str, str],
        window: Callable[[], int],
    ) -> None:
        self.gateway = gateway
        self.api = api
        self.model = model
        self.headers = headers
        self._window = window
        self.loop = asyncio.get_running_loop()

    @property
    def window(self) -> int:
        """The largest request the summary may be (compaction fits its request to it): the
        conversation's window now, one adopted during this very request included (a silent
        truncation's, whose retry compacts at once)."""
        return self._window()

    def summarize(self, request: Request) -> str:
        """The upstream's summary for the summarizer ``request``."""
        call = self._call(request)
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()

    async def _call(self, request: Request) -> str:
        max_tokens = request.max_output_tokens or 1024
        body = self.api.summary_body(self.model, request, max_tokens)
        self.gateway.summary_calls += 1
        reply = await self.gateway.upstream.request(
            "POST", self.api.path, headers=self.headers, content=orjson.dumps(body)
        )
        text = reply.body.decode("utf-8", errors="replace")
        if reply.status >= 400:
            found = _overflow(reply.status, reply.body)
            if found is not None:
                raise CompactionError(f"the summary request overflowed: {one_line(str(found))}")
            raise UpstreamError(
                "upstream",
                f"the upstream refused the summary request ({reply.status}: "
                f"{server_error_text(text)})",
            )
        try:
            value = orjson.loads(reply.body)
        except orjson.JSONDecodeError:
            raise UpstreamError("upstream", "the summary reply is not JSON") from None
        return self.api.summary_text(value) if isinstance(value, dict) else ""


def _overflow(status: int, body: bytes) -> ContextOverflowError | None:
    """An upstream error body read as an overflow, by ctxbudget's table of server messages."""
    found = classify_error(status, body.decode("utf-8", errors="replace"))
    return found if isinstance(found, ContextOverflowError) else None


def _too_deep(depth: int) -> str:
    return f"request body nests deeper than {depth} levels; no real request does"


def _with_upstream_headers(response: Response, upstream: Sequence[tuple[str, str]]) -> Response:
    """``response`` with the upstream's headers before its own: each as often as the upstream
    sent it (two ``Set-Cookie`` stay two; a dict would keep the last), in the upstream's order,
    except a name ``response`` sets itself (the gateway's ``x-ctxbudget-*``, the body's length)."""
    own = {name for name, _ in response.raw_headers}
    passed = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in upstream]
    response.raw_headers = [(k, v) for k, v in passed if k not in own] + response.raw_headers
    return response


def _error(api: WireApi, status: int, kind: str, message: str) -> Response:
    status, body = api.error(status, kind, message)
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _mock_transport(config: GatewayConfig) -> httpx.AsyncBaseTransport:
    from ctxbudget.gateway.mock_upstream import mock_app
    from ctxbudget.providers.mock import MockProvider

    provider = MockProvider("chat", window=config.window or _MOCK_WINDOW)
    return httpx.ASGITransport(app=mock_app(provider))


_frozen = threading.Event()


def freeze_startup_objects() -> None:
    """Once a process: take what is alive at start-up (modules, classes, the imported
    packages' tables, ~100,000 objects) out of the cyclic garbage collector's walks
    (`gc.freeze`). Each full collection walked them all, ~30 ms with the GIL held, a pause for
    whichever request it fell on (the gateway's p99 at 128K tokens). They live as long as the
    process; what requests make later is collected as before."""
    if _frozen.is_set():
        return
    _frozen.set()
    gc.collect()
    gc.freeze()


def create_app(
    config: GatewayConfig,
    *,
    apis: Sequence[WireApi] = DEFAULT_APIS,
    transport: httpx.AsyncBaseTransport | None = None,
    store: Any = None,
) -> Starlette:
    """The gateway for ``config`` as a Starlette app (``app.state.gateway`` is its `Gateway`).

    ``transport`` replaces the network to the upstream (tests; the mock model); ``store`` the
    SQLite state store (any `SessionStore`)."""
    gateway = Gateway(config, apis=apis, transport=transport, store=store)

    def guarded_route(api: WireApi) -> Route:
        async def endpoint(http: HttpRequest) -> Response:
            return await gateway.guarded(http, api)

        return Route(api.path, endpoint, methods=["POST"])

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        freeze_startup_objects()
        yield
        await gateway.aclose()

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(
        routes=[
            *(guarded_route(api) for api in apis),
            *(
                [Route(COUNT_TOKENS_PATH, gateway.count_tokens, methods=["POST"])]
                if MESSAGES in apis
                else []
            ),
            Route(STATUS_PATH, gateway.status, methods=["GET"]),
            Route("/{path:path}", gateway.forward, methods=methods),
        ],
        lifespan=lifespan,
    )
    mount_ops(app, ops_routes(gateway.metrics, gateway.health, status_path=STATUS_PATH))
    app.state.gateway = gateway
    return app
