"""Count whole requests: ``count_request`` once, or ``RequestCounter`` step after step.

For a built-in scheme the incremental counter keeps each message's count with the flags it was
rendered under; a step re-renders only new messages and those whose flags changed (in Qwen3,
assistant turns that a new user query moves before the last query lose their reasoning), and
where the scheme cuts such a message into ``Parts`` its body keeps its count. For a
Jinja template (``hf:PATH``) a step renders what changed and tokenises only the pieces of text it
has not seen (``template_count.PieceCache``).
"""

from __future__ import annotations

from collections.abc import Hashable

from ctxbudget.counting.result import RequestCount
from ctxbudget.counting.scheme import NO_PIVOT, Parts, Scheme, SplitScheme
from ctxbudget.counting.select import choose_scheme, counter_name_for_model
from ctxbudget.counting.template_count import PieceCache, TemplateScheme
from ctxbudget.messages.model import Message, Request, ToolSpec, common_prefix
from ctxbudget.tokens.base import CounterKind, TokenCounter
from ctxbudget.tokens.select import GENERIC_ESTIMATOR


def _assemble(
    scheme: Scheme,
    head: tuple[int, int],
    counts: list[int],
    approx: bool,
    *,
    generation: int | None = None,
    messages: int | None = None,
) -> RequestCount:
    """The count from per-message counts; ``generation`` and ``messages`` (the sum of
    ``counts``) may be given by a caller that keeps them, so a step does not re-sum."""
    system, tools = head
    gen = scheme.generation() if generation is None else generation
    total_messages = sum(counts) if messages is None else messages
    if counts:
        counts[-1] += gen  # one copy of the list: lend the last count the reply primer
        per_message = tuple(counts)
        counts[-1] -= gen
        total_messages += gen
    else:
        per_message = ()
        system += gen  # no message to carry the reply primer: the head does
    return RequestCount(
        counter=scheme.name,
        kind="estimate" if approx else scheme.kind,
        total=system + tools + total_messages,
        system=system,
        tools=tools,
        messages=total_messages,
        per_message=per_message,
        floor=system + tools,
    )


def count_with(scheme: Scheme | TemplateScheme, request: Request) -> RequestCount:
    """A full count of ``request`` by one scheme, with nothing cached."""
    if isinstance(scheme, TemplateScheme):
        return scheme.count(request)
    messages = request.messages
    pivot = scheme.pivot(messages)
    counts, approx = [], False
    for i, message in enumerate(messages):
        tokens, estimated = scheme.message(message, scheme.flags(messages, i, pivot))
        counts.append(tokens)
        approx = approx or estimated
    return _assemble(scheme, scheme.head(request), counts, approx)


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
        self._scheme = choose_scheme(counter, template=template, model=model)
        self.name: str = self._scheme.name
        self.kind: CounterKind = (
            "exact" if isinstance(self._scheme, TemplateScheme) else (self._scheme.kind)
        )
        self._head_key: tuple[str, tuple[ToolSpec, ...]] | None = None
        self._head = (0, 0)
        self._messages: tuple[Message, ...] = ()
        self._pivot = NO_PIVOT
        self._flags: list[Hashable] = []
        self._counts: list[int] = []
        self._approx: list[bool] = []
        self._sum = 0
        """Running sum of ``_counts`` and number of True in ``_approx``: a step adds and
        subtracts what changed instead of walking every message."""
        self._estimated = 0
        self._generation: int | None = None
        self._cache: dict[tuple[int, Hashable], tuple[Message, int, bool]] = {}
        self._split = self._scheme if isinstance(self._scheme, SplitScheme) else None
        self._bodies: dict[int, tuple[Message, int]] = {}
        """Token counts of ``Parts.body`` by message, whatever flags it was rendered under."""
        self._fixed: dict[str, int] = {}
        """Token counts of ``Parts.framing`` / ``closing`` texts (a few constants)."""
        self._high = 0
        """The most messages a counted request has held: the cache keeps at least that many."""
        self._last: tuple[Request, RequestCount] | None = None
        self._pieces = PieceCache()

    def count(self, request: Request) -> RequestCount:
        """The count of ``request``, equal to ``count_request`` with the same counter."""
        last = self._last
        if last is not None and _same_request(last[0], request):
            return last[1]  # a loop often counts one request several times: before, at send
        scheme = self._scheme
        if isinstance(scheme, TemplateScheme):
            result = scheme.count(request, self._pieces)
            self._pieces.trim()
        else:
            self._update_head(scheme, request)
            self._update_messages(scheme, request.messages)
            if self._generation is None:
                self._generation = scheme.generation()
            result = _assemble(
                scheme,
                self._head,
                self._counts,
                self._estimated > 0,
                generation=self._generation,
                messages=self._sum,
            )
        self._last = (request, result)
        return result

    def _update_head(self, scheme: Scheme, request: Request) -> None:
        key = (request.system, request.tools)
        old = self._head_key
        if old is None or not (old[0] == key[0] and (old[1] is key[1] or old[1] == key[1])):
            self._head = scheme.head(request)
            self._head_key = key

    def _update_messages(self, scheme: Scheme, messages: tuple[Message, ...]) -> None:
        old = self._messages
        common = common_prefix(old, messages)
        pivot = scheme.pivot(messages)
        start = max(common - 1, 0)  # the old last message's neighbours changed
        if pivot != self._pivot:
            start = min(start, min(pivot, self._pivot) + 1)
        start = max(start, 0)
        self._sum -= sum(self._counts[start:])
        self._estimated -= sum(self._approx[start:])
        del self._counts[start:], self._approx[start:], self._flags[start:]
        for i in range(start, len(messages)):
            flags = scheme.flags(messages, i, pivot)
            self._flags.append(flags)
            tokens, estimated = self._message(scheme, messages[i], flags)
            self._counts.append(tokens)
            self._approx.append(estimated)
            self._sum += tokens
            self._estimated += estimated
        self._messages, self._pivot = messages, pivot
        self._prune()

    def _message(self, scheme: Scheme, message: Message, flags: Hashable) -> tuple[int, bool]:
        key = (id(message), flags)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is message:
            return hit[1], hit[2]
        parts = self._split.parts(message, flags) if self._split is not None else None
        if parts is None:
            tokens, estimated = scheme.message(message, flags)
        else:
            tokens, estimated = self._parts_tokens(message, parts), False
        self._cache[key] = (message, tokens, estimated)
        return tokens, estimated

    def _parts_tokens(self, message: Message, parts: Parts) -> int:
        split = self._split
        assert split is not None
        body = self._bodies.get(id(message))
        if body is None or body[0] is not message:
            body = (message, split.tokens(parts.body))
            self._bodies[id(message)] = body
        tokens = body[1]
        for text in (parts.framing, parts.closing):
            fixed = self._fixed.get(text)
            if fixed is None:
                fixed = self._fixed[text] = split.tokens(text)
            tokens += fixed
        return tokens

    def _prune(self) -> None:
        # Entries hold their message, so ids stay unique; drop those of messages long gone.
        # The limit follows the largest request seen, so counting small side requests (one
        # message at a time, as compaction does) does not wipe the conversation's entries.
        self._high = max(self._high, len(self._messages))
        if len(self._cache) > 2 * self._high + 64:
            live = {id(m) for m in self._messages}
            self._cache = {k: v for k, v in self._cache.items() if k[0] in live}
            self._bodies = {k: v for k, v in self._bodies.items() if k in live}


def _same_request(a: Request, b: Request) -> bool:
    """True when ``b`` renders as ``a`` did: the same messages tuple, system and tools."""
    return a is b or (
        a.messages is b.messages
        and a.system == b.system
        and (a.tools is b.tools or a.tools == b.tools)
    )
