"""The interface a per-message counting scheme offers the full and incremental counters.

A scheme counts a request as independent parts: the head (system, tools), each message given
its *flags* (the few facts about its neighbours that its rendering depends on), and the
generation prompt. Parts are cut where no token can cross, so their counts add up exactly.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol, runtime_checkable

from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.base import CounterKind

NO_PIVOT = -1
"""The pivot of a scheme whose message renderings do not depend on a far-away message."""


class Scheme(Protocol):
    """How one model family turns a request into token counts, part by part."""

    @property
    def name(self) -> str:
        """The counter's name as a RequestCount reports it."""
        ...

    @property
    def kind(self) -> CounterKind:
        """``exact`` when the template and tokenizer are the server's own."""
        ...

    def head(self, request: Request) -> tuple[int, int]:
        """Tokens of the system part and of the tools part, each with its framing."""
        ...

    def pivot(self, messages: Sequence[Message], start: int = 0, previous: int = NO_PIVOT) -> int:
        """An index every message's rendering may depend on (Qwen3: the last user query).

        ``previous`` is the pivot of ``messages[:start]`` (as this method gave it), so an
        append looks at the new messages only; it must be given with ``start > 0`` (the
        default is no pivot, not "unknown"); ``start=0`` ignores it.
        """
        ...

    def flags(self, messages: Sequence[Message], start: int, pivot: int) -> Sequence[Hashable]:
        """What the rendering of each of ``messages[start:]`` depends on besides the message
        itself, in order: one call for a step's few messages or a whole request.

        Only a message's neighbours (``index - 1``, ``index + 1``), its being last, and its
        position relative to ``pivot`` may be used; the incremental counter relies on it.
        """
        ...

    def message(self, message: Message, flags: Hashable) -> tuple[int, bool]:
        """Tokens of one rendered message and whether any of them is an estimate (images)."""
        ...

    def generation(self) -> int:
        """Tokens of the generation prompt that primes the reply."""
        ...


@runtime_checkable
class SplitScheme(Scheme, Protocol):
    """A scheme that can cut some messages as ``framing + body + closing`` where no token
    crosses, so their counts add up to the message's. The body depends on the message alone
    (a reply's content, a tool result's text); the two frame texts on its role and flags
    alone. A counter keeps the body's count per message and the frames' per (role, flags): a
    flag change costs a look-up, a new message tokenises its body only."""

    def body(self, message: Message) -> str | None:
        """The body of ``message`` under every flag value; None where no exact cut is known
        (the counter then counts ``message(...)`` whole, per flag value)."""
        ...

    def frame(self, role: str, flags: Hashable) -> tuple[str, str]:
        """``(framing, closing)`` around the body of a ``role`` message rendered under
        ``flags``."""
        ...

    def tokens(self, text: str) -> int:
        """Tokens of ``text`` as the scheme's tokenizer counts it (special tokens parsed)."""
        ...

    def append_step(
        self, messages: Sequence[Message], pivot: int
    ) -> tuple[int, Hashable, Hashable, str] | None:
        """An agent loop's usual step in one call: ``messages`` ends with one new message after
        messages counted with ``pivot``, and the old last one has a body (``body`` is not
        None). ``(pivot, flags of messages[-2], flags of messages[-1], body of messages[-1])``
        when those are all the step changes; None where ``pivot``/``flags``/``body`` must run
        (the counter then does). Equal to them, as a test checks."""
        ...
