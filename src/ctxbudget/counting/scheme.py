"""The one interface every counting scheme offers, and the per-message schemes' shared code.

A scheme (``Scheme``) counts a request whole (``count``) and makes the state a
``RequestCounter`` keeps between requests (``incremental``), which counts the next request
given what changed since the last one (``messages.model.Change``).

The built-in schemes (Qwen, OpenAI's rules, the estimators) are ``MessageScheme``\\ s: they
count a request as independent parts: the head (system, tools), each message given its
*flags* (the few facts about its neighbours that its rendering depends on), and the
generation prompt. Parts are cut where no token can cross, so their counts add up exactly,
and ``MessageCounts`` keeps each part's count from request to request.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from ctxbudget.counting.result import RequestCount, RunningCounts
from ctxbudget.messages.model import Change, Message, Request
from ctxbudget.tokens.base import CounterKind

NO_PIVOT = -1
"""The pivot of a scheme whose message renderings do not depend on a far-away message."""


class IncrementalCount(Protocol):
    """What a ``RequestCounter`` keeps between requests for one scheme."""

    def count(self, request: Request, change: Change) -> RequestCount:
        """The count of ``request``, equal to the scheme's ``count``; ``change`` says what
        differs from the request this state counted last (all of it after a failed count)."""
        ...


class Scheme(Protocol):
    """How one model family (or one chat template) turns a request into token counts."""

    @property
    def name(self) -> str:
        """The counter's name as a RequestCount reports it."""
        ...

    @property
    def kind(self) -> CounterKind:
        """``exact`` when the template and tokenizer are the server's own."""
        ...

    def count(self, request: Request) -> RequestCount:
        """A full count of ``request``, with nothing kept."""
        ...

    def incremental(self) -> IncrementalCount:
        """A fresh state for counting request after request."""
        ...


class MessageScheme:
    """A scheme that counts each message alone, given its flags (the built-in schemes).

    Where ``body`` gives a message's text between two frame texts that no token crosses
    (``framing + body + closing``), the body depends on the message alone (a reply's content,
    a tool result's text) and the frames on its role and flags alone: ``MessageCounts`` then
    keeps the body's count per message and the frames' per (role, flags), so a flag change
    costs a look-up and a new message tokenises its body only.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        """The counter's name as a RequestCount reports it."""
        raise NotImplementedError

    @property
    def kind(self) -> CounterKind:
        """``exact`` when the template and tokenizer are the server's own."""
        raise NotImplementedError

    def head(self, request: Request) -> tuple[int, int]:
        """Tokens of the system part and of the tools part, each with its framing."""
        raise NotImplementedError

    def pivot(self, messages: Sequence[Message], start: int = 0, previous: int = NO_PIVOT) -> int:
        """An index every message's rendering may depend on (Qwen3: the last user query).

        ``previous`` is the pivot of ``messages[:start]`` (as this method gave it), so an
        append looks at the new messages only; it must be given with ``start > 0`` (the
        default is no pivot, not "unknown"); ``start=0`` ignores it. None by default.
        """
        return NO_PIVOT

    def flags(self, messages: Sequence[Message], start: int, pivot: int) -> Sequence[Hashable]:
        """What the rendering of each of ``messages[start:]`` depends on besides the message
        itself, in order: one call for a step's few messages or a whole request.

        Only a message's neighbours (``index - 1``, ``index + 1``), its being last, and its
        position relative to ``pivot`` may be used; ``MessageCounts`` relies on it. Nothing by
        default.
        """
        return [()] * (len(messages) - start)

    def message(self, message: Message, flags: Hashable) -> tuple[int, bool]:
        """Tokens of one rendered message and whether any of them is an estimate (images)."""
        raise NotImplementedError

    def generation(self) -> int:
        """Tokens of the generation prompt that primes the reply."""
        raise NotImplementedError

    splits = False
    """True when ``body``, ``frame`` and ``tokens`` are given (a class attribute)."""

    def body(self, message: Message) -> str | None:
        """The body of ``message`` under every flag value; None where no exact cut is known
        (the message is then counted whole by ``message``, per flag value)."""
        return None

    def frame(self, role: str, flags: Hashable) -> tuple[str, str]:
        """``(framing, closing)`` around the body of a ``role`` message rendered under
        ``flags``."""
        raise NotImplementedError

    def tokens(self, text: str) -> int:
        """Tokens of ``text`` as the scheme's tokenizer counts it (special tokens parsed)."""
        raise NotImplementedError

    def count(self, request: Request) -> RequestCount:
        """A full count of ``request``, with nothing kept."""
        messages = request.messages
        flags = self.flags(messages, 0, self.pivot(messages))
        counts, approx = RunningCounts(), False
        for message, f in zip(messages, flags, strict=True):
            tokens, estimated = self.message(message, f)
            counts.put(len(counts), tokens)
            approx = approx or estimated
        kind: CounterKind = "estimate" if approx else self.kind
        return counts.request_count(self.name, kind, self.head(request), self.generation())

    def incremental(self) -> MessageCounts:
        """A fresh state for counting request after request."""
        return MessageCounts(self)


class MessageCounts:
    """Each message's count with the flags it was rendered under, kept between requests.

    A request re-renders only its new messages and those whose flags changed (in Qwen3,
    assistant turns that a new user query moves before the last query lose their reasoning).
    Appending one message is the same path with one new message: the old last one's flags are
    looked at again, the new one is counted.
    """

    def __init__(
        self,
        scheme: MessageScheme,
        pivot: Callable[[Sequence[Message], int, int], int] | None = None,
        flags: Callable[[Sequence[Message], int, int], Sequence[Hashable]] | None = None,
    ) -> None:
        """``pivot`` and ``flags``: the functions behind the scheme's methods of those names,
        where it has them (a step then calls them directly, a call less each)."""
        self._scheme = scheme
        self._pivot_of = pivot or scheme.pivot
        self._flags_of = flags or scheme.flags
        self._name, self._kind = scheme.name, scheme.kind
        self._split = scheme.splits
        self._generation = scheme.generation()
        self._head = (0, 0)
        self._messages: tuple[Message, ...] = ()
        self._pivot = NO_PIVOT
        self._counts = RunningCounts()
        self._estimates: list[int] = []
        """The indices of messages whose count is an estimate (images), in order."""
        self._whole: dict[tuple[int, Hashable], tuple[Message, int, bool]] = {}
        """Counts of messages counted whole, by (message id, flags)."""
        self._bodies: dict[int, tuple[Message, int | None]] = {}
        """Token counts of ``body`` by message id (None: no cut), whatever the flags."""
        self._frames: dict[tuple[str, Hashable], int] = {}
        """Token counts of ``frame`` by (role, flags): a few constants."""
        self._high = 0
        """The most messages a counted request has held: the cache keeps at least that many."""

    def count(self, request: Request, change: Change) -> RequestCount:
        """The count of ``request``; only the messages past ``change.kept`` (and those whose
        flags changed) are counted again."""
        scheme = self._scheme
        if not change.same_head:
            self._head = scheme.head(request)
        messages, kept, old_pivot = request.messages, change.kept, self._pivot
        if change.appended:  # the old pivot holds for messages[:kept]: look at the new ones
            pivot = self._pivot_of(messages, kept, old_pivot)
        else:
            pivot = self._pivot_of(messages, 0, NO_PIVOT)
        start = kept - 1 if kept else 0  # the old last message's neighbours changed
        # No min() here and no keyword to zip() below: the first step after counting a long
        # request runs with the CPU caches full of the tokenizer's data, and each C function of
        # the interpreter that a step touches and the full count's loop does not (min_max; the
        # keyword parser, vgetargskeywords, that zip(..., strict=...) goes through) costs
        # instruction-cache misses. Under callgrind (a 2 MiB cache) the 1M-token step had 243 L2
        # instruction misses against 81 before issue 31; 115 without these and range() in
        # qwen.py (BENCHMARKS.md, "Counting internals"). test_counter_steps.py pins it.
        if pivot != old_pivot:  # the messages between the two pivots change flags
            first_moved = (pivot if pivot < old_pivot else old_pivot) + 1
            if first_moved < start:
                start = first_moved
        flags = self._flags_of(messages, start, pivot)
        counts: list[int] = []
        estimates = self._estimates
        if estimates and estimates[-1] >= start:  # committed at the end: a failure keeps them
            estimates = estimates[: bisect_left(estimates, start)]
        split, bodies, frames = self._split, self._bodies, self._frames
        for message, f in zip(messages[start:], flags):  # noqa: B905 as many: see above
            if split:  # a body's count whatever the flags, a frame's per flags
                body = bodies.get(id(message))
                if body is None or body[0] is not message:
                    text = scheme.body(message)
                    body = (message, None if text is None else scheme.tokens(text))
                    bodies[id(message)] = body
                if body[1] is not None:
                    frame = frames.get((message.role, f))
                    if frame is None:
                        frame = self._new_frame(message.role, f)
                    counts.append(body[1] + frame)
                    continue
            tokens, estimated = self._count_whole(message, f)
            counts.append(tokens)
            if estimated:
                if estimates is self._estimates:
                    estimates = list(estimates)
                estimates.append(start + len(counts) - 1)
        self._counts.replace(start, counts)  # usually the old last message and the new one
        self._estimates, self._messages, self._pivot = estimates, messages, pivot
        # Entries hold their message, so ids stay unique; drop those of messages long gone.
        # The limit follows the largest request seen, so counting small side requests (one
        # message at a time, as compaction does) does not wipe the conversation's entries.
        if len(messages) > self._high:
            self._high = len(messages)
        limit = 2 * self._high + 64
        if len(self._whole) > limit or len(bodies) > limit:
            self._prune()
        return self._result()

    def _new_frame(self, role: str, flags: Hashable) -> int:
        """The frame's tokens, counted and kept."""
        scheme = self._scheme
        framing, closing = scheme.frame(role, flags)
        tokens = self._frames[(role, flags)] = scheme.tokens(framing) + scheme.tokens(closing)
        return tokens

    def _result(self) -> RequestCount:
        """The count from the per-message counts as they are now."""
        kind: CounterKind = "estimate" if self._estimates else self._kind
        return self._counts.request_count(self._name, kind, self._head, self._generation)

    def _count_whole(self, message: Message, flags: Hashable) -> tuple[int, bool]:
        """A message counted whole, per flag value."""
        key = (id(message), flags)
        hit = self._whole.get(key)
        if hit is not None and hit[0] is message:
            return hit[1], hit[2]
        tokens, estimated = self._scheme.message(message, flags)
        self._whole[key] = (message, tokens, estimated)
        return tokens, estimated

    def _prune(self) -> None:
        """Drop the entries of messages the last request does not hold."""
        live = {id(m) for m in self._messages}
        self._whole = {k: v for k, v in self._whole.items() if k[0] in live}
        self._bodies = {k: v for k, v in self._bodies.items() if k in live}
