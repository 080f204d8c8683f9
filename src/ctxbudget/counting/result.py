"""What counting a whole request returns: a total and a breakdown that adds up to it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload


class PerMessage(Sequence[int]):
    """Each message's tokens, read-only: a tuple in all but type (equal to and hashed as the
    tuple of its items), built on the first read that needs all of them.

    An incremental counter keeps one running list of counts for step after step. A step
    hands out a view of it instead of a copy, at thousands of messages a cost of its own:
    ``counts[:length - 1]`` as they are now, then ``last``. The counter promises to leave that
    prefix as it is (it copies the list before changing it, see ``RequestCounter``).
    """

    __slots__ = ("_counts", "_last", "_length", "_tuple")

    def __init__(self, counts: list[int], length: int, last: int) -> None:
        self._counts = counts
        self._length = length
        self._last = last
        self._tuple: tuple[int, ...] | None = None

    def _items(self) -> tuple[int, ...]:
        items = self._tuple
        if items is None:
            items = self._tuple = (*self._counts[: self._length - 1], self._last)
        return items

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...
    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            return self._items()[index]
        at = index + self._length if index < 0 else index
        if not 0 <= at < self._length:
            raise IndexError("per_message index out of range")
        return self._last if at == self._length - 1 else self._counts[at]

    def __iter__(self) -> Iterator[int]:
        return iter(self._items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PerMessage | tuple):
            return self._items() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items())

    def __repr__(self) -> str:
        return repr(self._items())

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (self._items(),)  # pickled (and unpickled) as the plain tuple


@dataclass(frozen=True, kw_only=True, init=False)
class RequestCount:
    """Tokens of one rendered request, with template tokens attributed to the part they wrap.

    ``system + tools + messages == total``; ``per_message`` adds up to ``messages``, and
    ``messages`` includes the generation prompt's tokens (the part that primes the reply).
    ``floor`` is what every request pays whatever the conversation: system + tools + their framing.
    """

    counter: str
    """The tokenizer or estimator that counted, e.g. ``qwen3`` or ``ctxbudget``."""
    kind: Literal["exact", "estimate"]
    """``exact`` when the template and tokenizer are the server's own; else ``estimate``."""
    total: int
    system: int
    tools: int
    messages: int
    per_message: Sequence[int]
    """A tuple, or a ``PerMessage`` that compares and hashes as one."""
    floor: int

    def __init__(
        self,
        *,
        counter: str,
        kind: Literal["exact", "estimate"],
        total: int,
        system: int,
        tools: int,
        messages: int,
        per_message: Sequence[int],
        floor: int,
    ) -> None:
        # By hand, filling __dict__ at once: a frozen dataclass's own __init__ calls
        # object.__setattr__ per field, 3x the cost, and every incremental step makes one.
        self.__dict__.update(
            counter=counter,
            kind=kind,
            total=total,
            system=system,
            tools=tools,
            messages=messages,
            per_message=per_message,
            floor=floor,
        )
