"""The depth cap of a request body, walking only the items the gateway has not seen before.

`DepthMemo` answers `ctxbudget.messages.jsondepth.json_depth` for a body whose top-level lists
mostly repeat the conversation's last request (an agent resends its whole history each step).
It keys each item by its canonical JSON (``orjson``, the ``serve`` extra's), so it lives here,
with the gateway, not in the core's `jsondepth`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

import orjson

from ctxbudget.messages.jsondepth import MAX_JSON_DEPTH, json_depth

__all__ = ["MAX_NEW_ITEMS", "DepthMemo", "ItemKeys"]


ItemKeys = dict[int, bytes]
"""The canonical JSON (sorted keys) of each element of a body's top-level lists, by the
element's ``id()``: computed once by `DepthMemo.body_depth`, reused by whatever else keys an
item by its value (the gateway's item memo, its conversation digests) while the body lives."""


MAX_NEW_ITEMS = 256
"""How far before a list's end `DepthMemo` looks for the end of a list it measured before."""


@dataclass(slots=True)
class _SeenList:
    keys: list[bytes]
    """The canonical JSON of its items, in order (the objects the memo hands out)."""
    depth: int
    """The depth of its deepest item."""
    size: int
    """Bytes of its keys (shared with the memo's own: an upper bound of what it holds)."""


class DepthMemo:
    """`json_depth` of a JSON object whose top-level lists hold items seen before: an agent
    resends its whole conversation every step, so all but its newest items were measured on
    an earlier request, and one Python step per JSON node (~2.3 ms at ~130K tokens) is most of
    the check. Each element of a top-level list is looked up by its canonical JSON (its whole
    value, not a digest: no collision); only elements not found are walked.

    Why this is as safe as walking everything:

    - The depth of a value is a function of its JSON value, and the key is that whole value
      (sorted keys: a client that reorders an object's keys is still found). A remembered
      depth is the exact depth of an equal value; the result is exactly `json_depth`'s.
    - Nothing recursive in Python touches an element before its depth is known. The key is made
      by ``orjson.dumps``, which is native code with its own recursion limit (255 levels): an
      element deeper than that raises ``JSONEncodeError``, is not remembered and is walked by
      `json_depth`, which uses no recursion and stops past ``limit``. (The body itself came from
      ``orjson.loads``, which refuses nesting past 1,024 levels.) Only elements found shallow
      are remembered, so a remembered key is always a shallow value.
    - A list whose leading items' bytes equal those of a list measured before (compared whole:
      an agent's request is its last one and a step) takes that list's depth for them.
    - Memory is bounded: the oldest keys (and lists) are dropped past ``max_bytes`` (first in,
      first out: no per-item bookkeeping on a hit; an item dropped while still resent is walked
      once more and remembered again).
    """

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._depths: dict[bytes, tuple[bytes, int]] = {}
        """Each value's depth, and the key object itself (`body_depth` hands that one out)."""
        self._bytes = 0
        self._lists: dict[tuple[int, bytes], _SeenList] = {}
        """Lists measured before, by their length and last item (the keys of their items and
        their deepest item's depth): the request an agent sends next starts with one."""
        self._list_bytes = 0
        self._lock = threading.Lock()
        self.walked = 0
        """Elements walked so far (not found remembered): what the checks cost (tests read it)."""

    def body_depth(self, value: object, limit: int = MAX_JSON_DEPTH) -> tuple[int, ItemKeys]:
        """``json_depth(value, limit)``, and the canonical JSON of each element of ``value``'s
        top-level lists (`ItemKeys`). Any value but an object is walked whole."""
        keys: ItemKeys = {}
        if not isinstance(value, dict):
            return json_depth(value, limit), keys
        deepest = 1
        for field in value.values():
            if not isinstance(field, list):
                deepest = max(deepest, 1 + json_depth(field, limit))
            else:
                deepest = max(deepest, 1 + self._list_depth(field, limit, keys))
            if deepest > limit:
                break
        return deepest, keys

    def _list_depth(self, items: list[Any], limit: int, keys: ItemKeys) -> int:
        """The depth of the list ``items`` (1 + its deepest element), its elements' keys put in
        ``keys``. Written as whole-list steps (comprehensions, ``map``, slices): a Python loop
        body per item would cost as much as the walk it saves."""
        dumps, sort_keys = orjson.dumps, orjson.OPT_SORT_KEYS
        try:
            found = [dumps(item, option=sort_keys) for item in items]
        except orjson.JSONEncodeError:  # past orjson's 255 levels, or an int past 64 bits
            return json_depth(items, limit)  # walked, nothing remembered
        # A list that starts with one seen before (an agent's last request): its leading items
        # are known by one comparison of their bytes, not a lookup each.
        seen = self._seen_prefix(found)
        start = 0 if seen is None else len(seen.keys)
        rest = found[start:]
        with self._lock:
            remembered = list(map(self._depths.get, rest))
        # The remembered key object stands for an equal one (one copy of each item's text is
        # kept, however many memos refer to it, and later equality tests stop at identity).
        if None in remembered:
            rest = [key if r is None else r[0] for key, r in zip(rest, remembered, strict=True)]
            known = [None if r is None else r[1] for r in remembered]
        else:
            rest = list(map(_first, cast("list[tuple[bytes, int]]", remembered)))
            known = list(map(_second, cast("list[tuple[bytes, int]]", remembered)))
        if None in known:
            new: list[tuple[bytes, int]] = []
            for index, depth in enumerate(known):
                if depth is None:
                    self.walked += 1
                    depth = known[index] = json_depth(items[start + index], limit)
                    if depth > limit:
                        return 1 + depth  # too deep: nothing more to learn, nothing kept
                    new.append((rest[index], depth))
            self._remember(new)
        deepest = max(cast("list[int]", known), default=0)
        if seen is not None:
            deepest = max(deepest, seen.depth)
            rest = [*seen.keys, *rest]
        keys.update(zip(map(id, items), rest, strict=True))
        if rest:
            self._remember_list(_SeenList(rest, deepest, sum(map(len, rest))), seen)
        return 1 + deepest

    def _seen_prefix(self, found: list[bytes]) -> _SeenList | None:
        """The longest remembered list ``found`` starts with (its items' bytes equal), looked
        for at most `MAX_NEW_ITEMS` before its end; None when there is none."""
        n = len(found)
        with self._lock:
            for length in range(n, max(0, n - MAX_NEW_ITEMS), -1):
                seen = self._lists.get((length, found[length - 1]))
                if seen is not None and seen.keys == found[:length]:
                    return seen
        return None

    def _remember_list(self, value: _SeenList, replaces: _SeenList | None) -> None:
        """Remember a list of known depth; the one it continues (``replaces``) is dropped."""
        with self._lock:
            if replaces is not None:
                continued = (len(replaces.keys), replaces.keys[-1])
                if self._lists.get(continued) is replaces:
                    del self._lists[continued]
                    self._list_bytes -= replaces.size
            if value.size > self.max_bytes:
                return
            key = (len(value.keys), value.keys[-1])
            old = self._lists.pop(key, None)
            if old is not None:
                self._list_bytes -= old.size
            self._lists[key] = value
            self._list_bytes += value.size
            while self._list_bytes > self.max_bytes:
                dropped = self._lists.pop(next(iter(self._lists)))  # the oldest
                self._list_bytes -= dropped.size

    def _remember(self, new: list[tuple[bytes, int]]) -> None:
        with self._lock:
            for key, depth in new:
                if len(key) > self.max_bytes or key in self._depths:
                    continue
                self._depths[key] = (key, depth)
                self._bytes += len(key)
            while self._bytes > self.max_bytes:
                old = next(iter(self._depths))  # the oldest (dicts keep insertion order)
                del self._depths[old]
                self._bytes -= len(old)

    def __len__(self) -> int:
        """Values remembered now."""
        with self._lock:
            return len(self._depths)


_first, _second = itemgetter(0), itemgetter(1)
