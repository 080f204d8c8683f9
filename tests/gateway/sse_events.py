"""Streamed-event fixtures for the wire API tests: the events of a file under tests/data/sse,
and partial usage reports merged as the gateway merges them (`WireApi.stream_usage`)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from tests.conftest import data_file

from ctxbudget.gateway.api import merge_usage
from ctxbudget.gateway.sse import SseParser
from ctxbudget.messages.usage import Usage


def sse_events(name: str) -> list[tuple[str | None, str]]:
    """(event name, data) of each event in tests/data/sse/``name``, read by the gateway's own
    SSE parser fed in small pieces (as a network delivers them)."""
    raw = data_file("sse", name).read_bytes()
    parser = SseParser()
    events = [e for i in range(0, len(raw), 97) for e in parser.feed(raw[i : i + 97])]
    assert not parser.flush().strip()  # every event complete
    return [(e.name, e.data) for e in events if e.data is not None]


def merged(parts: Iterable[Usage | None]) -> Usage | None:
    """The partial reports of one stream as one, as the gateway merges them (`merge_usage`)."""
    return functools.reduce(merge_usage, parts, None)
