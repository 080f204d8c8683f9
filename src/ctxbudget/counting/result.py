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
    ``counts[:length - 1]`` as they are now, then ``last``. ``RunningCounts`` leaves that
    prefix as it is.
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


class RunningCounts:
    """An incremental counter's per-message counts from step to step, with their sum.

    It hands out views of itself (``view``) instead of copies, and never changes a count a view
    reads: a cut or a change there starts a new list, which the views do not see.
    """

    __slots__ = ("_frozen", "items", "total")

    def __init__(self) -> None:
        self.items: list[int] = []
        self.total = 0
        """``sum(items)``, kept as counts change, so a step does not add up every message."""
        self._frozen = 0
        """``items[:_frozen]`` is read by a view handed out."""

    def __len__(self) -> int:
        return len(self.items)

    def cut(self, n: int) -> None:
        """Keep the first ``n`` counts."""
        items = self.items
        if n >= len(items):
            return
        self.total -= sum(items[n:])  # a slice: islice would walk the kept ones too
        if n < self._frozen:
            self.items, self._frozen = items[:n], 0
        else:
            del items[n:]

    def put(self, index: int, tokens: int) -> None:
        """Count ``index`` is ``tokens``; ``index == len(self)`` adds a last one."""
        items = self.items
        if index == len(items):
            items.append(tokens)
            self.total += tokens
            return
        old = items[index]
        if old == tokens:
            return
        if index < self._frozen:
            items, self._frozen = list(items), 0
            self.items = items
        items[index] = tokens
        self.total += tokens - old

    def replace(self, start: int, counts: list[int]) -> None:
        """The counts from ``start`` on are ``counts``: those under a view, if unchanged, stay
        as they are (no copy), the rest are cut and added."""
        items, frozen = self.items, self._frozen
        if start >= frozen:  # no view reads them: in place (a step's usual case)
            self.total += sum(counts) - sum(items[start:])
            items[start:] = counts
            return
        under = min(frozen, len(items)) - start
        if items[start : start + under] == counts[:under]:
            start, counts = start + under, counts[under:]
        self.cut(start)
        self.items += counts
        self.total += sum(counts)

    def request_count(
        self, name: str, kind: Literal["exact", "estimate"], head: tuple[int, int], generation: int
    ) -> RequestCount:
        """The count of a request whose messages have these counts, ``head`` its system's
        and tools' tokens, ``generation`` the reply primer's, counted with the last message."""
        system, tools = head
        messages = self.total
        per_message: PerMessage | tuple[()] = ()
        if self.items:  # a view, not a copy
            per_message = self.view(generation)
            messages += generation
        else:
            system += generation  # no message to carry the reply primer: the head does
        return new_count(name, kind, system, tools, messages, per_message)

    def view(self, extra: int) -> PerMessage:
        """The counts as they are now, the last ``extra`` more, as they stay for the view."""
        items = self.items
        read = len(items) - 1
        if read > self._frozen:
            self._frozen = read
        return PerMessage(items, read + 1, items[-1] + extra)


def new_count(
    name: str,
    kind: Literal["exact", "estimate"],
    system: int,
    tools: int,
    messages: int,
    per_message: Sequence[int],
) -> RequestCount:
    """``RequestCount(...)`` with ``total`` and ``floor`` from the parts, made fast: every
    incremental step makes one."""
    floor = system + tools
    # __dict__ set at once: the frozen dataclass's own __init__ takes keywords (packed into
    # a dict on the way) and sets each field with object.__setattr__, ~3x the cost.
    # tests/counting/test_per_message.py checks it gives what RequestCount(...) gives.
    count: RequestCount = object.__new__(RequestCount)
    object.__setattr__(
        count,
        "__dict__",
        {
            "counter": name,
            "kind": kind,
            "total": floor + messages,
            "system": system,
            "tools": tools,
            "messages": messages,
            "per_message": per_message,
            "floor": floor,
        },
    )
    return count


@dataclass(frozen=True, kw_only=True)
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
