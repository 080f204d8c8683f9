"""Count whole requests: ``count_request`` once, or ``RequestCounter`` step after step.

For a built-in scheme the incremental counter keeps each message's count with the flags it was
rendered under; a step re-renders only new messages and those whose flags changed (in Qwen3,
assistant turns that a new user query moves before the last query lose their reasoning), and
where the scheme cuts a message into frame and body (``SplitScheme``) the body keeps its count
and a new flag value costs a look-up. For a
Jinja template (``hf:PATH``) a step renders what changed and tokenises only the pieces of text it
has not seen (``template_count.PieceCache``).
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Hashable
from typing import TYPE_CHECKING, cast

from ctxbudget.counting.result import RequestCount, RunningCounts
from ctxbudget.counting.scheme import NO_PIVOT, Scheme, SplitScheme
from ctxbudget.counting.select import choose_scheme, counter_name_for_model
from ctxbudget.messages.model import (
    Message,
    Request,
    ToolSpec,
    alike,
    common_prefix,
    extends,
)
from ctxbudget.tokens.base import CounterKind, TokenCounter
from ctxbudget.tokens.select import GENERIC_ESTIMATOR

if TYPE_CHECKING:
    from ctxbudget.counting.template_count import PieceCache, TemplateScheme


def _as_template(scheme: Scheme | TemplateScheme) -> TemplateScheme | None:
    """``scheme`` when it renders a Jinja template, else None.

    Only ``choose_scheme`` makes a ``TemplateScheme``, importing ``template_count`` (and Jinja)
    as it does; a scheme made while that module is unimported cannot be one, so counting with
    the built-in schemes never loads Jinja.
    """
    module = sys.modules.get("ctxbudget.counting.template_count")
    if module is not None and isinstance(scheme, module.TemplateScheme):
        return cast("TemplateScheme", scheme)
    return None


def count_with(scheme: Scheme | TemplateScheme, request: Request) -> RequestCount:
    """A full count of ``request`` by one scheme, with nothing cached."""
    template = _as_template(scheme)
    if template is not None:
        return template.count(request)
    scheme = cast("Scheme", scheme)  # a built-in scheme: every other kind
    messages = request.messages
    flags = scheme.flags(messages, 0, scheme.pivot(messages))
    counts, approx = RunningCounts(), False
    for message, f in zip(messages, flags, strict=True):
        tokens, estimated = scheme.message(message, f)
        counts.put(len(counts), tokens)
        approx = approx or estimated
    kind: CounterKind = "estimate" if approx else scheme.kind
    return counts.request_count(scheme.name, kind, scheme.head(request), scheme.generation())


def count_request(
    request: Request,
    counter: str | TokenCounter | None = None,
    *,
    model: str | None = None,
    template: str | None = None,
) -> RequestCount:
    """Tokens of the whole rendered request, with ``system + tools + messages == total``.

    ``counter`` is a tokenizer name (``qwen3``, ``qwen2.5``, ``qwen3.6``, ``cl100k_base``,
    ``o200k_base``, ``hf:PATH``) or an estimator name; by default it follows ``model`` (or the
    request's model): the model's own tokenizer where it is public, else the generic estimate.
    ``template`` overrides the template the name implies; ``model`` also tunes the estimate
    rules (Claude's tool-use prompt).
    """
    chosen_model = model or request.model
    if counter is None:
        counter = counter_name_for_model(chosen_model)
    scheme = choose_scheme(counter, template=template, model=chosen_model)
    return count_with(scheme, request)


class RequestCounter:
    """Counts request after request, re-rendering only what changed; equals a full recount."""

    def __init__(
        self,
        counter: str | TokenCounter | None = None,
        *,
        template: str | None = None,
        model: str | None = None,
    ) -> None:
        """``counter`` as in ``count_request``; by default it follows ``model`` (``hf:PATH``:
        that folder's tokenizer and template), else the generic estimate."""
        if counter is None:
            counter = counter_name_for_model(model) if model else GENERIC_ESTIMATOR
        chosen = choose_scheme(counter, template=template, model=model)
        self.name: str = chosen.name
        self.kind: CounterKind = "exact"
        self._generation = 0
        """The reply primer's tokens (a built-in scheme's; a template counts its own)."""
        self._template = _as_template(chosen)
        """A Jinja template's scheme, which counts whole requests itself; None otherwise."""
        self._pieces: PieceCache | None = None
        """The template's token counts of text pieces, made with its first count."""
        scheme = self._scheme = cast("Scheme", chosen)  # used only when _template is None
        if self._template is None:
            self.kind, self._generation = scheme.kind, scheme.generation()
        self._head_of: tuple[str | None, tuple[ToolSpec, ...]] | None = None
        """The system prompt and tools ``_head`` was counted for; None before the first count
        (a system prompt of None is a request without one, not "not counted yet")."""
        self._head = (0, 0)
        self._messages: tuple[Message, ...] = ()
        self._pivot = NO_PIVOT
        self._counts = RunningCounts()
        self._estimates: list[int] = []
        """The indices of messages whose count is an estimate (images), in order."""
        self._cache: dict[tuple[int, Hashable], tuple[Message, int, bool]] = {}
        self._split = self._scheme if isinstance(self._scheme, SplitScheme) else None
        self._bodies: dict[int, tuple[Message, int | None]] = {}
        """Token counts of ``SplitScheme.body`` by message (None: no cut), whatever flags."""
        self._frames: dict[tuple[str, Hashable], int] = {}
        """Token counts of ``SplitScheme.frame`` by (role, flags): a few constants."""
        self._high = 0
        """The most messages a counted request has held: the cache keeps at least that many."""
        self._last: tuple[Request, RequestCount] | None = None

    def count(self, request: Request) -> RequestCount:
        """The count of ``request``, equal to ``count_request`` with the same counter."""
        head_of = self._head_of
        same_head = (
            head_of is not None
            and request.system == head_of[0]
            and alike(head_of[1], request.tools)
        )
        if (  # a loop's usual step first: one message appended, the head as it was
            same_head and extends(request, self._messages) and self._append_one(request.messages)
        ):
            return self._result(request)
        last = self._last
        if last is not None and _same_request(last[0], request):
            return last[1]  # a loop often counts one request several times: before, at send
        template = self._template
        if template is not None:
            if self._pieces is None:
                from ctxbudget.counting.template_count import PieceCache

                self._pieces = PieceCache()
            result = template.count(request, self._pieces)
            self._pieces.trim()
            self._last = (request, result)
            return result
        scheme = self._scheme
        if not same_head:
            self._head = scheme.head(request)
            self._head_of = (request.system, request.tools)
        self._update_messages(scheme, request)
        return self._result(request)

    def _result(self, request: Request) -> RequestCount:
        """The count from the per-message counts as they are now, kept as the last one."""
        kind: CounterKind = "estimate" if self._estimates else self.kind
        result = self._counts.request_count(self.name, kind, self._head, self._generation)
        self._last = (request, result)
        return result

    def _update_messages(self, scheme: Scheme, request: Request) -> None:
        messages, old = request.messages, self._messages
        if extends(request, old):
            common = len(old)  # ``count`` tried ``_append_one`` (if the head was the same)
        else:
            common = common_prefix(old, messages)
            if common == len(old) and self._append_one(messages):
                return
        appended = common == len(old)  # the old pivot holds for messages[:common]
        pivot = scheme.pivot(messages, common, self._pivot) if appended else scheme.pivot(messages)
        start = common - 1 if common else 0  # the old last message's neighbours changed
        if pivot != self._pivot:
            start = min(start, pivot + 1, self._pivot + 1)
        flags = scheme.flags(messages, start, pivot)
        counts: list[int] = []
        estimates = self._estimates[: bisect_left(self._estimates, start)]  # committed at the end
        split, bodies, frames = self._split, self._bodies, self._frames
        for i, (message, f) in enumerate(zip(messages[start:], flags, strict=True), start):
            if split is not None:  # a body's count whatever the flags, a frame's per flags
                body = bodies.get(id(message))
                if body is None or body[0] is not message:
                    text = split.body(message)
                    body = (message, None if text is None else split.tokens(text))
                    bodies[id(message)] = body
                if body[1] is not None:
                    frame = frames.get((message.role, f))
                    if frame is None:
                        frame = self._new_frame(split, message.role, f)
                    counts.append(body[1] + frame)
                    continue
            tokens, estimated = self._whole(scheme, message, f)
            counts.append(tokens)
            if estimated:
                estimates.append(i)
        self._counts.replace(start, counts)  # usually the old last message and the new one
        self._estimates, self._messages, self._pivot = estimates, messages, pivot
        self._prune()

    def _append_one(self, messages: tuple[Message, ...]) -> bool:
        """``messages``, which start with the last request's, one message longer, the old last
        one with a body: the split scheme's ``append_step`` in one call, where it can. False:
        the general step must run."""
        split, old = self._split, self._messages
        if split is None or not old or len(messages) != len(old) + 1:
            return False
        last = messages[-2]
        body = self._bodies.get(id(last))
        if body is None or body[0] is not last or body[1] is None:
            return False
        step = split.append_step(messages, self._pivot)
        if step is None:
            return False
        pivot, last_flags, new_flags, text = step
        new, frames = messages[-1], self._frames
        framed = frames.get((last.role, last_flags))
        if framed is None:
            framed = self._new_frame(split, last.role, last_flags)
        new_framed = frames.get((new.role, new_flags))
        if new_framed is None:
            new_framed = self._new_frame(split, new.role, new_flags)
        tokens = split.tokens(text)
        self._bodies[id(new)] = (new, tokens)
        self._counts.append_after(body[1] + framed, tokens + new_framed)
        self._messages, self._pivot = messages, pivot
        self._prune()
        return True

    def _whole(self, scheme: Scheme, message: Message, flags: Hashable) -> tuple[int, bool]:
        """A message counted whole, per flag value."""
        key = (id(message), flags)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is message:
            return hit[1], hit[2]
        tokens, estimated = scheme.message(message, flags)
        self._cache[key] = (message, tokens, estimated)
        return tokens, estimated

    def _new_frame(self, split: SplitScheme, role: str, flags: Hashable) -> int:
        """The frame's tokens, counted and kept on a miss of ``_frames``."""
        framing, closing = split.frame(role, flags)
        tokens = self._frames[(role, flags)] = split.tokens(framing) + split.tokens(closing)
        return tokens

    def _prune(self) -> None:
        # Entries hold their message, so ids stay unique; drop those of messages long gone.
        # The limit follows the largest request seen, so counting small side requests (one
        # message at a time, as compaction does) does not wipe the conversation's entries.
        if len(self._messages) > self._high:
            self._high = len(self._messages)
        limit = 2 * self._high + 64
        if len(self._cache) > limit or len(self._bodies) > limit:
            live = {id(m) for m in self._messages}
            self._cache = {k: v for k, v in self._cache.items() if k[0] in live}
            self._bodies = {k: v for k, v in self._bodies.items() if k in live}


def _same_request(a: Request, b: Request) -> bool:
    """True when ``b`` renders as ``a`` did: the same messages tuple, system and tools."""
    return a is b or (a.messages is b.messages and a.system == b.system and alike(a.tools, b.tools))
