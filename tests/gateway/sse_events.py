"""Streamed-event fixtures for the wire API tests: the events of a file under tests/data/sse,
and partial usage reports merged as the gateway merges them (`WireApi.stream_usage`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tests.conftest import data_file

from ctxbudget.messages.usage import Usage


def sse_events(name: str) -> list[tuple[str | None, str]]:
    """(event name, data) of each event in tests/data/sse/``name``."""
    events: list[tuple[str | None, str]] = []
    for block in data_file("sse", name).read_text().split("\n\n"):
        event: str | None = None
        data: list[str] = []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].strip())
        if data:
            events.append((event, "\n".join(data)))
    return events


def merged(parts: Iterable[Usage | None]) -> Usage | None:
    """The partial reports of one stream as one: each later non-zero count wins (the
    contract `WireApi.stream_usage` states)."""
    total: Usage | None = None
    for part in parts:
        if part is None:
            continue
        if total is None:
            total = part
            continue
        changes = {
            f.name: getattr(part, f.name)
            for f in dataclasses.fields(Usage)
            if getattr(part, f.name) not in (0, None)
        }
        total = dataclasses.replace(total, **changes)
    return total
