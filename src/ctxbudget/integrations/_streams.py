"""The SDK's streams passed through, each reply's usage recorded as it goes by."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

__all__ = ["AsyncUsageStream", "UsageStream"]

Record = Callable[[Any], None]


def usage_of(event: Any) -> Any:
    """A chat chunk's ``usage``, or a responses event's ``response.usage`` (on completion)."""
    usage = getattr(event, "usage", None)
    return usage if usage is not None else getattr(getattr(event, "response", None), "usage", None)


class UsageStream:
    """An SDK ``Stream``: iterate it (or use it as a context manager) as the SDK's own."""

    def __init__(self, stream: Any, record: Record) -> None:
        self._stream = stream
        self._record = record

    def __iter__(self) -> Iterator[Any]:
        for event in self._stream:
            usage = usage_of(event)
            if usage is not None:
                self._record(usage)
            yield event

    def __enter__(self) -> UsageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()

    def close(self) -> None:
        """Close the underlying HTTP response."""
        self._stream.close()


class AsyncUsageStream:
    """An SDK ``AsyncStream``: iterate it with ``async for`` as the SDK's own."""

    def __init__(self, stream: Any, record: Record) -> None:
        self._stream = stream
        self._record = record

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for event in self._stream:
            usage = usage_of(event)
            if usage is not None:
                self._record(usage)
            yield event

    async def __aenter__(self) -> AsyncUsageStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stream.close()

    async def close(self) -> None:
        """Close the underlying HTTP response."""
        await self._stream.close()
