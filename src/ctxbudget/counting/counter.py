"""Count whole requests: ``count_request`` once, or ``RequestCounter`` step after step.

``RequestCounter`` owns one scheme's incremental state (``Scheme.incremental``) and decides,
in one place (``messages.model.what_changed``), what changed since the request it counted
last; the state counts again only that. docs/counting-internals.md walks through it.
"""

from __future__ import annotations

from ctxbudget.counting.result import RequestCount
from ctxbudget.counting.scheme import Scheme
from ctxbudget.counting.select import choose_scheme, counter_name_for_model
from ctxbudget.messages.model import Request, what_changed
from ctxbudget.tokens.base import CounterKind, TokenCounter
from ctxbudget.tokens.select import GENERIC_ESTIMATOR


def count_with(scheme: Scheme, request: Request) -> RequestCount:
    """A full count of ``request`` by one scheme, with nothing cached."""
    return scheme.count(request)


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
    return choose_scheme(counter, template=template, model=chosen_model).count(request)


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
        scheme = choose_scheme(counter, template=template, model=model)
        self.name: str = scheme.name
        self.kind: CounterKind = scheme.kind
        self._state = scheme.incremental()
        self._last: tuple[Request, RequestCount] | None = None
        """The request counted last and its count; None before the first count and after a
        count that failed midway (the state may then hold part of it: all is counted again)."""

    def count(self, request: Request) -> RequestCount:
        """The count of ``request``, equal to ``count_request`` with the same counter."""
        last = self._last
        change = what_changed(last[0] if last is not None else None, request)
        if change.same:
            assert last is not None
            return last[1]
        self._last = None
        result = self._state.count(request, change)
        self._last = (request, result)
        return result
