"""Reuse a template's head and tail across steps when what they read of ``messages`` is unchanged.

A memoised loop (``template_loop``) still renders the template around it on every count: the
head (system prompt, tool list, date) and the tail (generation prompt). Those read little of
``messages`` (``messages[0]``, its length, ``messages[1:]``), so the render is given an
``Observed`` list that records each read as a path of slices and an index or a length. A later
request whose reads give the same objects, with the same tools and clock, renders the same head
and tail (a template is a function of what it reads), so only the loop runs again. A render
that iterates ``messages`` (or reads it any other way) reads all of it and is not reused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, SupportsIndex

from jinja2.runtime import Undefined
from markupsafe import Markup

# Values the loop body may take from the head: text, numbers, functions (raise_exception).
_FIXED = (str, int, float, bool, type(None), Markup, Undefined, type(len), type(lambda: None))


@dataclass(slots=True)
class Reads:
    """What one render read of ``messages`` (of ``length`` items), and of the clock."""

    length: int
    items: list[tuple[tuple[slice, ...], int, int | None]] = field(default_factory=list)
    """Each item read: the slices it was read through, its index there, and its position in
    ``messages`` (None: out of range)."""
    lengths: list[tuple[tuple[slice, ...], int]] = field(default_factory=list)
    whole: bool = False
    """True when the render read ``messages`` some other way (iterated, compared, printed)."""
    clock: list[tuple[str, str]] = field(default_factory=list)
    """``strftime_now`` calls: format and result."""

    def strftime_now(self, now: Callable[[str], str]) -> Callable[[str], str]:
        """``now`` recording each call, for the render's ``strftime_now``."""

        def recorded(fmt: str) -> str:
            text = now(fmt)
            self.clock.append((fmt, text))
            return text

        return recorded


def _view(n: int, path: tuple[slice, ...]) -> range:
    positions = range(n)
    for cut in path:
        positions = positions[cut]
    return positions


def _position(n: int, path: tuple[slice, ...], index: int) -> int | None:
    """Where ``index`` of the list ``path`` makes from ``n`` messages is; None: out of range."""
    try:
        return _view(n, path)[index] if path else range(n)[index]
    except IndexError:
        return None


class Observed(list[Any]):
    """A list of message dicts that records, in ``reads``, what is read of it."""

    __slots__ = ("_path", "_reads")

    def __init__(self, items: list[Any], reads: Reads, path: tuple[slice, ...] = ()) -> None:
        super().__init__(items)
        self._reads = reads
        self._path = path

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return Observed(list.__getitem__(self, key), self._reads, (*self._path, key))
        if type(key) is not int:
            self._whole()
            return list.__getitem__(self, key)
        reads = self._reads
        reads.items.append((self._path, key, _position(reads.length, self._path, key)))
        return list.__getitem__(self, key)

    def __len__(self) -> int:
        n = list.__len__(self)
        self._reads.lengths.append((self._path, n))
        return n

    def _whole(self) -> None:
        self._reads.whole = True

    def __radd__(self, other: Any) -> Any:
        self._whole()
        return other + list.copy(self)

    def __str__(self) -> str:
        self._whole()
        return list.__repr__(self)

    def __format__(self, spec: str) -> str:
        self._whole()
        return format(list.copy(self), spec)

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError("an observed message list is not copied")

    __hash__ = None


def _reading_all(name: str) -> Callable[..., Any]:
    method = getattr(list, name)

    def whole(self: Observed, *args: Any) -> Any:
        self._whole()
        return method(self, *args)

    whole.__name__ = name
    return whole


# Each of these reads every item (or may): the render depends on the whole list.
for _name in (
    "__iter__",
    "__reversed__",
    "__contains__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__add__",
    "__mul__",
    "__rmul__",
    "__repr__",
    "index",
    "count",
    "copy",
):
    setattr(Observed, _name, _reading_all(_name))


def unobserved(seq: Any) -> tuple[list[Any], tuple[slice, ...] | None]:
    """``seq`` as a plain list, unrecorded, and the slices that made it from ``messages``
    (None when it is not an observed list). A module function, not a method: the sandbox
    lets templates call public methods, and these must stay out of a template's reach."""
    if isinstance(seq, Observed):
        return list.copy(seq), seq._path
    return seq, None


@dataclass(frozen=True, slots=True)
class Frame:
    """A render's head and tail text, what they read, and how its loop was called."""

    before: str
    after: str
    reads: Reads
    tools: Any
    view: tuple[slice, ...]
    """The slices that made the list the loop was given (``messages[1:]``)."""
    body: Any
    outer: tuple[Any, ...]
    before_tokens: int
    after_tokens: int
    before_cut: bool
    """``before`` ends with an added token the tokenizer cuts at."""
    after_cut: bool
    """``after`` starts with one."""
    length_cuts: frozenset[int] | None = None
    """Lengths only compared with these constants (``LoopPlan.length_cuts``): a length on the
    same side of each as before reads the same; None: only the same length does."""

    def reusable(self, n: int, same: int, tools: Any, now: Callable[[str], str]) -> bool:
        """True when a render of ``n`` messages, the first ``same`` of them the very items this
        render was given (the requests' kept prefix), would read what this one read."""
        reads = self.reads
        if tools is not self.tools:
            return False
        for fmt, text in reads.clock:  # loops, not generators: a step runs each once
            if now(fmt) != text:
                return False
        cuts = self.length_cuts
        for path, length in reads.lengths:
            other = len(_view(n, path))
            if other != length and (cuts is None or _side(other, cuts) != _side(length, cuts)):
                return False
        for path, index, position in reads.items:  # each read at a kept position, as before
            if _position(n, path, index) != position or (position is not None and position >= same):
                return False
        return True


def suffix_start(n: int, path: tuple[slice, ...]) -> int | None:
    """``k`` where the list ``path`` makes from ``n`` messages is ``messages[k:]``; None when it
    is another slice."""
    positions = _view(n, path)
    return positions.start if positions.step == 1 and positions.stop == n else None


def _side(length: int, cuts: frozenset[int]) -> tuple[bool, ...]:
    """Which side of each cut ``length`` is on (``length < cut`` for each): comparisons of the
    length with ``c`` (``==``, ``<``, ...) give the same answers for two lengths with the same
    sides when ``c`` and ``c + 1`` are cuts."""
    return tuple(length < cut for cut in sorted(cuts))


def frame_allowed(outer: tuple[Any, ...]) -> bool:
    """True when the values the loop body takes from the head are plain and cannot change
    behind it (text, numbers, functions); a namespace or list the tail may still alter is not."""
    return all(isinstance(v, _FIXED) for v in outer)
