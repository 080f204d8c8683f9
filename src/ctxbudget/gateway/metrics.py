"""The gateway's Prometheus metrics and its ``GET /metrics`` route.

One `GatewayMetrics` per app, on its own ``CollectorRegistry`` (never the process-global one),
so tests and several apps in one process do not collide. The app calls its small methods; the
compaction, overflow and silent-truncation counts come from the budget sessions themselves:
`GatewayMetrics.on_session_event` is a `BudgetSession` event sink (``on_event=``), so the session
that decides is the one source of those numbers.

Metrics (every name starts ``ctxbudget_``; no label carries anything from a request, so the
series stay few whatever clients send):

- ``requests_total{api, outcome}``: requests answered, by API (``chat``, ``responses``,
  ``messages``, ``passthrough``, ...) and outcome (`OUTCOMES`; any other value counts as
  ``other``).
- ``compactions_total{trigger, strategy}``: compactions made (trigger ``context_pressure`` or
  ``context_overflow``).
- ``overflow_errors_total``: requests the upstream refused as too long.
- ``silent_truncations_total{kind}``: overflows the upstream did not report: ``prompt`` (it cut
  the front of the prompt and answered 200, Ollama) or ``reply`` (a reply stopped by a window
  smaller than ours).
- ``overflow_recoveries_total``: compactions made because of an overflow (refused, or silent),
  after which the request was sent again.
- ``window_adoptions_total``: times a smaller window was adopted from what the upstream stated.
- ``compactions_capped_total``: pressure compactions skipped because a turn reached its cap.
- ``tokens_received_total{api}`` / ``tokens_forwarded_total{api}``: tokens counted in requests
  as clients sent them, and as the gateway forwarded them (after compaction).
- ``upstream_latency_seconds{api}`` (histogram): from sending upstream to the reply's end.
- ``gateway_overhead_seconds{api}`` (histogram): the time the gateway added (total minus
  upstream time; summary calls made for a compaction count as overhead).
- ``conversations``: conversations tracked now (read at scrape time from a callable).
- ``upstream_window_tokens``: the upstream's window in force.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = [
    "LATENCY_BUCKETS",
    "OUTCOMES",
    "OVERHEAD_BUCKETS",
    "GatewayMetrics",
    "RequestTimer",
    "Timing",
    "chain_sinks",
    "metrics_route",
]

OUTCOMES: Final = frozenset(
    {
        "ok",  # answered, nothing changed
        "compacted",  # forwarded compacted: compacted now, or an earlier compaction's view
        "passthrough",  # forwarded unguarded (a path or body the gateway does not read)
        "client_error",  # refused before the upstream: bad JSON, too large, too deep, no key
        "floor",  # system + tools + reply room exceed the window: nothing could fit
        "overflow",  # still over the window after the one retry (CompactionError)
        "upstream_error",  # the upstream failed, stalled or answered an error
        "cancelled",  # the client went away before the reply ended
    }
)
"""The ``outcome`` label's values; others are counted as ``other`` (a bounded label set)."""

# Overhead is parse + count + forward (sub-millisecond to milliseconds) unless a compaction
# writes a summary through the upstream (seconds): the buckets cover both.
OVERHEAD_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# A local model's reply takes from milliseconds (a short answer) to minutes (a long one).
LATENCY_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

_SILENT_KINDS: Final = {"truncated": "prompt", "length": "reply"}
"""`BudgetSession`'s ``silent`` field of an overflow event → the ``kind`` label."""


class GatewayMetrics:
    """The gateway's counters, histograms and gauges on a registry of their own.

    ``conversations``: a callable giving the number of conversations tracked now, read at each
    scrape (else set it with `set_conversations`).
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        conversations: Callable[[], float] | None = None,
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        r = self.registry
        self.requests = Counter(
            "ctxbudget_requests",
            "Requests answered, by API and outcome.",
            ["api", "outcome"],
            registry=r,
        )
        self.compactions = Counter(
            "ctxbudget_compactions",
            "Compactions made, by trigger and strategy.",
            ["trigger", "strategy"],
            registry=r,
        )
        self.overflow_errors = Counter(
            "ctxbudget_overflow_errors", "Requests the upstream refused as too long.", registry=r
        )
        self.silent_truncations = Counter(
            "ctxbudget_silent_truncations",
            "Overflows the upstream did not report: prompt (front cut) or reply (cut short).",
            ["kind"],
            registry=r,
        )
        self.overflow_recoveries = Counter(
            "ctxbudget_overflow_recoveries",
            "Compactions made because of an overflow, then the request sent again.",
            registry=r,
        )
        self.window_adoptions = Counter(
            "ctxbudget_window_adoptions",
            "Times a smaller window was adopted from what the upstream stated or showed.",
            registry=r,
        )
        self.compactions_capped = Counter(
            "ctxbudget_compactions_capped",
            "Pressure compactions skipped: the turn reached its compaction cap.",
            registry=r,
        )
        self.tokens_received = Counter(
            "ctxbudget_tokens_received",
            "Tokens counted in requests as clients sent them.",
            ["api"],
            registry=r,
        )
        self.tokens_forwarded = Counter(
            "ctxbudget_tokens_forwarded",
            "Tokens counted in requests as forwarded upstream.",
            ["api"],
            registry=r,
        )
        self.upstream_latency = Histogram(
            "ctxbudget_upstream_latency_seconds",
            "Time from sending a request upstream to the end of its reply.",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "ctxbudget_gateway_overhead_seconds",
            "Time the gateway added to a request (total minus upstream time).",
            ["api"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.conversations = Gauge(
            "ctxbudget_conversations", "Conversations tracked now.", registry=r
        )
        if conversations is not None:
            self.conversations.set_function(conversations)
        self.upstream_window = Gauge(
            "ctxbudget_upstream_window_tokens", "The upstream's window in force.", registry=r
        )

    # -- what the app calls -------------------------------------------------------------------

    def request(self, api: str, outcome: str) -> None:
        """Count one answered request (``outcome`` one of `OUTCOMES`, else ``other``)."""
        self.requests.labels(api=api, outcome=outcome if outcome in OUTCOMES else "other").inc()

    def tokens(self, api: str, *, received: int, forwarded: int) -> None:
        """Tokens of one request: as the client sent it and as it was forwarded."""
        self.tokens_received.labels(api=api).inc(max(0, received))
        self.tokens_forwarded.labels(api=api).inc(max(0, forwarded))

    def upstream_seconds(self, api: str, seconds: float) -> None:
        """One upstream call's latency."""
        self.upstream_latency.labels(api=api).observe(max(0.0, seconds))

    def overhead_seconds(self, api: str, seconds: float) -> None:
        """The time the gateway added to one request."""
        self.overhead.labels(api=api).observe(max(0.0, seconds))

    @contextmanager
    def timed_upstream(self, api: str) -> Iterator[None]:
        """Observe the block's duration as upstream latency (also when it raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.upstream_seconds(api, time.perf_counter() - start)

    def timer(self, api: str) -> RequestTimer:
        """A clock for one request of ``api``, started now (see `RequestTimer`)."""
        return RequestTimer(self, api)

    def set_conversations(self, count: int) -> None:
        """The number of conversations tracked now (when no callable was given)."""
        self.conversations.set(count)

    def set_upstream_window(self, window: int) -> None:
        """The upstream's window in force."""
        self.upstream_window.set(window)

    # -- counted from the sessions' own events -------------------------------------------------

    def compaction(self, trigger: str, strategy: str) -> None:
        """Count one compaction; one triggered by an overflow is also a recovery."""
        self.compactions.labels(trigger=trigger, strategy=strategy).inc()
        if trigger == "context_overflow":
            self.overflow_recoveries.inc()

    def overflow(self, silent: str | None) -> None:
        """Count one overflow: refused with an error (``silent`` None) or silent
        (``"truncated"``: the prompt was cut; ``"length"``: the reply was cut short)."""
        if silent is None:
            self.overflow_errors.inc()
        else:
            self.silent_truncations.labels(kind=_SILENT_KINDS.get(silent, silent)).inc()

    def on_session_event(self, kind: str, data: Mapping[str, Any]) -> None:
        """A `BudgetSession` event sink (its ``on_event``): compactions, overflows, window
        adoptions and capped turns become metrics. Other events are ignored."""
        if kind == "compaction":
            self.compaction(str(data.get("trigger", "")), str(data.get("strategy", "")))
        elif kind == "overflow":
            silent = data.get("silent")
            self.overflow(None if silent is None else str(silent))
        elif kind == "window_changed":
            self.window_adoptions.inc()
        elif kind == "capped":
            self.compactions_capped.inc()

    # -- the exposition -----------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)

    async def endpoint(self, request: Request) -> Response:
        """The ``GET /metrics`` handler."""
        return Response(self.exposition(), media_type=CONTENT_TYPE_LATEST)


@dataclass(frozen=True, slots=True)
class Timing:
    """One request's times in milliseconds, as `RequestTimer.done` observed them (for its log
    line)."""

    duration_ms: float
    upstream_ms: float
    overhead_ms: float


class RequestTimer:
    """One request's clock. The time spent upstream (`upstream` blocks, or `begin_upstream` to
    `end_upstream` for a stream: the forwarded request, its retry) is upstream latency, the rest
    of the request's time is the gateway's overhead (parsing, counting, compacting: a summary
    call is overhead). `done` observes both and counts the request, once."""

    def __init__(self, metrics: GatewayMetrics, api: str) -> None:
        self.metrics = metrics
        self.api = api
        self.started = time.perf_counter()
        self.upstream_s = 0.0
        self._upstream_since: float | None = None
        self.timing: Timing | None = None
        """Set by the first `done`."""

    @contextmanager
    def upstream(self) -> Iterator[None]:
        """Count the block's duration as upstream time (also when it raises)."""
        self.begin_upstream()
        try:
            yield
        finally:
            self.end_upstream()

    def begin_upstream(self) -> None:
        """Upstream time starts now (a stream: where it is opened; `end_upstream` at its end)."""
        self._upstream_since = time.perf_counter()

    def end_upstream(self) -> None:
        """Upstream time since `begin_upstream` ends now (nothing when none began)."""
        if self._upstream_since is not None:
            self.upstream_s += time.perf_counter() - self._upstream_since
            self._upstream_since = None

    def done(
        self, outcome: str, *, received: int | None = None, forwarded: int | None = None
    ) -> Timing:
        """The request ended with ``outcome``: count it, its tokens (when counted) and its
        times. A second call changes nothing and returns the first timing."""
        if self.timing is not None:
            return self.timing
        self.end_upstream()  # an upstream call that raised before its end
        total = time.perf_counter() - self.started
        overhead = max(0.0, total - self.upstream_s)
        m = self.metrics
        m.request(self.api, outcome)
        if received is not None and forwarded is not None:
            m.tokens(self.api, received=received, forwarded=forwarded)
        if self.upstream_s > 0:
            m.upstream_seconds(self.api, self.upstream_s)
        m.overhead_seconds(self.api, overhead)
        self.timing = Timing(
            duration_ms=1000 * total,
            upstream_ms=1000 * self.upstream_s,
            overhead_ms=1000 * overhead,
        )
        return self.timing


def metrics_route(metrics: GatewayMetrics, path: str = "/metrics") -> Route:
    """The Starlette route serving ``metrics`` at ``path`` (GET and HEAD)."""
    return Route(path, metrics.endpoint, methods=["GET"], name="metrics")


def chain_sinks(
    *sinks: Callable[[str, dict[str, Any]], None] | None,
) -> Callable[[str, dict[str, Any]], None]:
    """One `BudgetSession` event sink calling each of ``sinks`` in order (None skipped): the
    metrics' and the status page's record from the same events."""
    live = tuple(s for s in sinks if s is not None)

    def sink(kind: str, data: dict[str, Any]) -> None:
        for each in live:
            each(kind, data)

    return sink
