"""What a wire API provides the gateway: the `WireApi` protocol and the `Parsed` value.

The gateway is one loop for every API it speaks (Chat Completions, Responses, Anthropic
Messages). Everything that differs between them lives behind `WireApi`: how a body is read into
our `Request`, how the request the budget session decided to send is written back into a wire
body, where the usage and stop reason are in a reply (whole or streamed), what an error looks
like, and how a summary is asked of the upstream model through the same API.

Contract for implementations (stable: the Responses and Messages modules build on it):

- `WireApi.parse` never raises anything but `ctxbudget.errors.InputError` (and its subclasses)
  for a body it cannot read; the gateway answers that with ``error(400, "invalid_request", ...)``.
- `Parsed.translated` maps each message back to the wire item it came from
  (`ctxbudget.integrations._view.translate`), so `WireApi.forward_body` forwards unchanged items
  verbatim (ids, signatures, ``cache_control`` survive) and rebuilds only what compaction made.
- A request the gateway must not guard (server-side state such as ``previous_response_id``, an
  ``n`` > 1, ...) is parsed with ``passthrough`` set to a short reason; it is forwarded as it
  came, with the ``x-ctxbudget-passthrough`` header saying why.
- Usage and stop reasons are returned in our vocabulary (`Usage`; ``"stop"``, ``"length"``,
  ``"tool_calls"`` or the API's own word), or None when the reply or event holds none.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import orjson

from ctxbudget.gateway.depth import ItemKeys
from ctxbudget.integrations._view import Resume, Translated
from ctxbudget.messages.model import Request
from ctxbudget.messages.usage import Usage

__all__ = [
    "ErrorKind",
    "ItemMemo",
    "JsonBody",
    "Parsed",
    "ReadLists",
    "WireApi",
    "first_text",
    "json_object",
    "merge_usage",
]

JsonBody = dict[str, Any]
"""A request or reply body as read from JSON."""

ErrorKind = str
"""What went wrong, in the gateway's words; each API maps it to its own error type:
``"invalid_request"`` (bad input, 400), ``"authentication"`` (401), ``"not_found"`` (404),
``"too_large"`` (413), ``"context_length_exceeded"`` (the floor, an overflow that survived
compaction), ``"upstream"`` (the upstream failed: 502), ``"timeout"`` (504)."""


class ItemMemo:
    """The messages each wire item was read as, by the item's canonical JSON (sorted keys),
    least recently used dropped past ``max_bytes`` of keys: an agent resends its whole
    conversation every step, so all but its newest items were read on an earlier request.

    Safe because reading an item is a pure function of its JSON value (the readers look fields
    up by name, so key order cannot change what they make), the messages are frozen values
    shared read-only, and a key is the item's whole value, not a digest of it (no collision).
    An item that fails to read is not remembered (it raises again, with its own path).

    `read_all` remembers by position too (the key is the item's index and value): what it
    returns is the messages as `translate` stamps them for that index, so an item resent at
    the same place is the very same `Message` objects request after request, and every later
    comparison of a resent list (`what_changed`, ``observe``) takes its identity fast path."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._read: OrderedDict[Any, tuple[Any, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # parse runs on the event loop and in worker threads

    def read(self, item: Any, reader: Callable[[Any], tuple[Any, ...]]) -> tuple[Any, ...]:
        """``reader(item)``, or what it returned for an equal item before."""
        try:
            key = orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # not from orjson.loads (an int past 64 bits): not kept
            return reader(item)
        with self._lock:
            found = self._read.get(key)
            if found is not None:
                self._read.move_to_end(key)
                return found
        value = reader(item)
        self._remember([(key, len(key), value)])
        return value

    def read_all(
        self,
        items: Sequence[Any],
        reader: Callable[[int, Any], tuple[Any, ...]],
        keys: ItemKeys | None = None,
        start: int = 0,
    ) -> list[tuple[Any, ...]]:
        """``[reader(start + i, item) for i, item in enumerate(items)]``, each from what it
        returned for an equal item at the same index before (``items`` are a list's items from
        index ``start`` on). ``keys``: the items' canonical JSON where the caller has it
        (`DepthMemo.body_depth`); else it is made here. Written as whole-list steps (``map``):
        a Python loop body per item costs more than the lookups."""
        values = list(map((keys or {}).get, map(id, items)))
        if None in values:
            values = [
                v if v is not None else _canonical(item)
                for v, item in zip(values, items, strict=True)
            ]
        wanted: list[tuple[int, bytes] | None] = (
            [None if v is None else (i, v) for i, v in enumerate(values, start)]
            if None in values
            else list(
                zip(range(start, start + len(values)), cast("list[bytes]", values), strict=True)
            )
        )
        with self._lock:
            memo = self._read
            out = list(map(memo.get, wanted))
            hits: list[Any] = wanted
            if None in out:
                hits = [k for k, v in zip(wanted, out, strict=True) if v is not None]
            deque(map(memo.move_to_end, hits), 0)
        if None not in out:
            return cast("list[tuple[Any, ...]]", out)
        new: list[tuple[Any, int, tuple[Any, ...]]] = []
        done: list[tuple[Any, ...]] = []
        for index, (item, key, found) in enumerate(zip(items, wanted, out, strict=True), start):
            if found is None:
                found = reader(index, item)  # raises for a bad item: nothing kept for it
                if key is not None:
                    new.append((key, len(key[1]), found))
            done.append(found)
        if new:
            self._remember(new)
        return done

    def _remember(self, new: list[tuple[Any, int, tuple[Any, ...]]]) -> None:
        with self._lock:
            for key, size, value in new:
                if size > self.max_bytes or key in self._read:
                    continue
                self._read[key] = value
                self._bytes += size
            while self._bytes > self.max_bytes:
                old, _ = self._read.popitem(last=False)
                self._bytes -= len(old[1]) if isinstance(old, tuple) else len(old)

    def __len__(self) -> int:
        """Items remembered now."""
        with self._lock:
            return len(self._read)


MAX_NEW_ITEMS = 256
"""`ReadLists` looks for a list read before at most this many items before a list's end."""


class ReadLists:
    """What each list of items read before was read as (`Resume`), by its items' canonical
    JSON: an agent's request is its last one and a step, so all but its newest items were read
    as part of that one, and `translate` goes on from it (`translate`'s ``resume``) instead of
    taking each item's messages again (a Python step per item).

    Safe as `ItemMemo` is: the items are compared by their whole canonical JSON (not a
    digest), so a list taken over starts with items equal to those it was read from, at the
    same places, and reading is a pure function of an item's value and index. The key objects
    are mostly `DepthMemo`'s (one object per value), so a comparison mostly stops at identity.
    Bounded by ``max_lists`` and by ``max_bytes`` of keys referred to; the oldest dropped."""

    def __init__(self, max_lists: int = 4096, max_bytes: int = 32 * 2**20) -> None:
        self.max_lists = max_lists
        self.max_bytes = max_bytes
        self._lists: OrderedDict[tuple[int, bytes], tuple[list[bytes], Resume, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def find(
        self, items: Sequence[Any], keys: ItemKeys | None
    ) -> tuple[list[bytes] | None, Resume | None]:
        """The items' keys (None unless ``keys`` holds every one), and what the longest list
        read before that they start with was read as (None: none is known)."""
        if not keys or not items:
            return None, None
        found = list(map(keys.get, map(id, items)))
        if None in found:
            return None, None
        full = cast("list[bytes]", found)
        n = len(full)
        with self._lock:
            for length in range(n, max(0, n - MAX_NEW_ITEMS), -1):
                entry = self._lists.get((length, full[length - 1]))
                if entry is not None and entry[0] == full[:length]:
                    return full, entry[1]
        return full, None

    def remember(self, keys: list[bytes] | None, read: Resume, before: Resume | None) -> None:
        """Remember that the list of ``keys`` was read as ``read``; ``before``, the list it
        continued, is dropped (one entry a conversation). Not kept when `translate` could not
        go on from it (`Resume.begun`)."""
        if keys is None or not keys or not read.begun():
            return
        size = sum(map(len, keys))
        with self._lock:
            if before is not None:
                old = (len(before.per_item), keys[len(before.per_item) - 1])
                entry = self._lists.get(old)
                if entry is not None and entry[1] is before:
                    del self._lists[old]
                    self._bytes -= entry[2]
            if size > self.max_bytes:
                return
            key = (len(keys), keys[-1])
            entry = self._lists.pop(key, None)
            if entry is not None:
                self._bytes -= entry[2]
            self._lists[key] = (keys, read, size)
            self._bytes += size
            while self._bytes > self.max_bytes or len(self._lists) > self.max_lists:
                _, dropped = self._lists.popitem(last=False)
                self._bytes -= dropped[2]


def _canonical(item: Any) -> bytes | None:
    """``item``'s canonical JSON (sorted keys), or None where orjson cannot write it (an int
    past 64 bits: not from ``orjson.loads``)."""
    try:
        return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Parsed:
    """A request body read by a `WireApi`: our `Request` and what the gateway needs around it."""

    request: Request
    """The conversation as our values: system prompt, tools, messages (usage attached by the
    gateway later), ``max_output_tokens`` as the client asked, ``model``."""
    translated: Translated[Any]
    """The wire items of the conversation and the messages each became (`translate`); the way
    back for `WireApi.forward_body`."""
    head: Any = None
    """What frames the conversation outside its items (Responses' ``instructions``, Anthropic's
    ``system``), JSON-serialisable, or None: part of the conversation's identity."""
    stream: bool = False
    """The client asked for a streamed reply."""
    model: str | None = None
    """The model the client named (the summary is written by it unless ``--summary-model``)."""
    passthrough: str | None = None
    """Why this request is forwarded unguarded (one short phrase), or None: it is guarded."""


class WireApi(Protocol):
    """One wire API (Chat Completions, Responses, Anthropic Messages) as the gateway speaks it."""

    name: str
    """Short name: ``"chat"``, ``"responses"``, ``"messages"``; also the namespace of its
    conversations' keys in the state store."""
    path: str
    """The request path it serves, e.g. ``"/v1/chat/completions"``."""

    def parse(self, body: JsonBody, keys: ItemKeys | None = None) -> Parsed:
        """Read a request body (already JSON, depth-checked). Raises `InputError` (one line
        naming the field) for a body this API cannot accept. ``keys``: the canonical JSON of
        the items of its top-level lists, when the caller made it (`DepthMemo.body_depth`)."""
        ...

    def forward_body(
        self, body: JsonBody, parsed: Parsed, sent: Request, max_tokens: int | None
    ) -> JsonBody:
        """The body to send upstream for ``sent`` (the request the budget session decided on):
        ``body`` with its conversation replaced by ``sent.messages`` mapped back through
        ``parsed.translated`` (unchanged items verbatim, compacted ones rebuilt). Every other
        field stays as the client sent it; ``max_tokens`` not None replaces the reply limit
        (a clamp), None leaves it as sent. Returns a new dict; ``body`` is not changed."""
        ...

    def usage(self, reply: JsonBody) -> Usage | None:
        """The usage of a whole (non-streamed) reply body, or None when it has none."""
        ...

    def stop_reason(self, reply: JsonBody) -> str | None:
        """Why a whole reply stopped (``"length"`` when cut by its token limit), or None."""
        ...

    def stream_usage(self, event: str | None, data: str) -> Usage | None:
        """The usage one streamed event carries (``event`` its SSE ``event:`` name or None,
        ``data`` its data), or None. Where an API reports usage in parts (Anthropic: input at
        the start, output at the end), each part is returned and the caller merges them, the
        later non-zero counts winning."""
        ...

    def stream_stop_reason(self, event: str | None, data: str) -> str | None:
        """Why a streamed reply stopped, when ``event`` says it, else None."""
        ...

    def prepare_stream(self, body: JsonBody) -> tuple[JsonBody, bool]:
        """``body`` as sent upstream for a streamed request, and whether the gateway added a
        usage report the client did not ask for (Chat Completions'
        ``stream_options.include_usage``): then events for which `is_extra_usage_event` is true
        are kept from the client."""
        ...

    def is_extra_usage_event(self, event: str | None, data: str) -> bool:
        """True for an event that exists only because `prepare_stream` asked for usage."""
        ...

    def error(self, status: int, kind: ErrorKind, message: str) -> tuple[int, JsonBody]:
        """The (status, body) of an error in this API's own shape; ``message`` is one line."""
        ...

    def summary_body(self, model: str, request: Request, max_tokens: int) -> JsonBody:
        """The upstream body asking ``model`` for ``request`` (a compaction's summarizer
        request: a system prompt and one user message), its reply held to ``max_tokens``,
        never streamed."""
        ...

    def summary_text(self, reply: JsonBody) -> str:
        """The text of the reply to `summary_body` ("" when it holds none)."""
        ...


def first_text(value: Mapping[str, Any] | None, *keys: str) -> str | None:
    """Walk ``value`` by ``keys`` (a key or a list index as digits) to a string, or None."""
    current: Any = value
    for key in keys:
        if isinstance(current, Mapping):
            current = current.get(key)
        elif isinstance(current, list) and key.isdigit() and int(key) < len(current):
            current = current[int(key)]
        else:
            return None
    return current if isinstance(current, str) else None


def json_object(data: str | bytes) -> dict[str, Any] | None:
    """``data`` parsed when it is a JSON object, else None (not JSON, or another value): what
    the gateway reads of a reply or a streamed event it does not have to understand."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def merge_usage(total: Usage | None, part: Usage | None) -> Usage | None:
    """A stream's usage so far with one more partial report (`WireApi.stream_usage`): each
    non-zero count of ``part`` replaces the one before, the others stay (Anthropic reports the
    prompt in ``message_start`` and only the reply's tokens in ``message_delta``)."""
    if part is None:
        return total
    if total is None:
        return part
    changes = {
        f.name: getattr(part, f.name)
        for f in dataclasses.fields(Usage)
        if getattr(part, f.name) not in (0, None)
    }
    return dataclasses.replace(total, **changes)
