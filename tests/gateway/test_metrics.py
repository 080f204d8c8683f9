"""`GatewayMetrics`: what the app counts, what the budget sessions' own events count, and
``GET /metrics`` read back with prometheus-client's own parser."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.testclient import TestClient
from tests.agent.conversations import long_conversation

from ctxbudget.agent.budget_session import BudgetSession, Reply
from ctxbudget.agent.silent import SilentOverflow
from ctxbudget.counting import RequestCounter
from ctxbudget.errors import ContextOverflowError
from ctxbudget.gateway.metrics import (
    OVERHEAD_BUCKETS,
    GatewayMetrics,
    chain_sinks,
    metrics_route,
)
from ctxbudget.messages.model import Request
from ctxbudget.messages.usage import Usage

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(metrics: GatewayMetrics) -> Samples:
    """Every sample of the exposition, parsed by prometheus-client: (name, labels) → value."""
    text = metrics.exposition().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    """One sample's value (0 when the series does not exist yet)."""
    return samples(metrics).get((name, tuple(sorted(labels.items()))), 0.0)


class Summarizer:
    """A summarizer that answers at once and counts its calls; its window holds any fold (one
    call a compaction)."""

    window = 131_072

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: Request) -> str:
        self.calls += 1
        return "The user discussed many topics; nothing is pending."


@pytest.fixture(scope="module")
def qwen3() -> RequestCounter:
    return RequestCounter("qwen3")


def test_requests_tokens_and_latencies_parse_back() -> None:
    m = GatewayMetrics()
    m.request("chat", "ok")
    m.request("chat", "ok")
    m.request("messages", "compacted")
    m.request("chat", "some label a client made up")  # bounded: counted as "other"
    m.tokens("chat", received=12_000, forwarded=5_000)
    m.tokens("chat", received=1_000, forwarded=1_000)
    m.upstream_seconds("chat", 0.25)
    m.overhead_seconds("chat", 0.0007)
    m.overhead_seconds("chat", 3.0)
    m.set_upstream_window(8192)
    assert value(m, "ctxbudget_requests_total", api="chat", outcome="ok") == 2
    assert value(m, "ctxbudget_requests_total", api="messages", outcome="compacted") == 1
    assert value(m, "ctxbudget_requests_total", api="chat", outcome="other") == 1
    assert value(m, "ctxbudget_tokens_received_total", api="chat") == 13_000
    assert value(m, "ctxbudget_tokens_forwarded_total", api="chat") == 6_000
    assert value(m, "ctxbudget_upstream_latency_seconds_count", api="chat") == 1
    assert value(m, "ctxbudget_upstream_latency_seconds_sum", api="chat") == pytest.approx(0.25)
    assert value(m, "ctxbudget_gateway_overhead_seconds_count", api="chat") == 2
    # 0.7 ms falls in the 1 ms bucket and above; 3 s only from the 5 s bucket on.
    first = value(m, "ctxbudget_gateway_overhead_seconds_bucket", api="chat", le="0.001")
    assert first == 1
    assert value(m, "ctxbudget_gateway_overhead_seconds_bucket", api="chat", le="5.0") == 2
    assert str(OVERHEAD_BUCKETS[-1]) == "30.0"
    assert value(m, "ctxbudget_upstream_window_tokens") == 8192


def test_conversations_are_read_when_scraped() -> None:
    tracked = {"n": 3}
    m = GatewayMetrics(conversations=lambda: tracked["n"])
    assert value(m, "ctxbudget_conversations") == 3
    tracked["n"] = 41
    assert value(m, "ctxbudget_conversations") == 41


def test_two_apps_in_one_process_keep_their_own_numbers() -> None:
    one, two = GatewayMetrics(), GatewayMetrics()  # the global registry would refuse the second
    one.request("chat", "ok")
    assert value(one, "ctxbudget_requests_total", api="chat", outcome="ok") == 1
    assert value(two, "ctxbudget_requests_total", api="chat", outcome="ok") == 0


def test_a_pressure_compaction_is_counted_from_the_session(qwen3: RequestCounter) -> None:
    m = GatewayMetrics()
    summarizer = Summarizer()
    session = BudgetSession(
        window=2048,
        counter=qwen3,
        summarizer=summarizer,
        strategy="summarize",
        on_event=m.on_session_event,
    )
    session.run(long_conversation(), lambda sent: "ok", new_turn=True)
    assert summarizer.calls == 1
    got = samples(m)
    compactions = {k: v for k, v in got.items() if k[0] == "ctxbudget_compactions_total"}
    assert compactions == {
        (
            "ctxbudget_compactions_total",
            (("strategy", "summarize"), ("trigger", "context_pressure")),
        ): 1
    }
    assert value(m, "ctxbudget_overflow_recoveries_total") == 0
    assert value(m, "ctxbudget_overflow_errors_total") == 0


def test_an_overflow_error_and_its_recovery_are_counted(qwen3: RequestCounter) -> None:
    m = GatewayMetrics()
    session = BudgetSession(
        window=32_768,
        counter=qwen3,
        summarizer=Summarizer(),
        strategy="summarize",
        on_event=m.on_session_event,
    )
    request = long_conversation()
    size = qwen3.count(request).total
    refused: list[bool] = []

    def send(sent: Request) -> str:
        if not refused:
            refused.append(True)
            raise ContextOverflowError(
                "prompt too long", limit=size // 2 + 600, prompt_tokens=size + 10
            )
        return "ok"

    assert session.run(request, send, new_turn=True) == "ok"
    assert value(m, "ctxbudget_overflow_errors_total") == 1
    assert value(m, "ctxbudget_overflow_recoveries_total") == 1
    assert value(m, "ctxbudget_window_adoptions_total") == 1
    assert (
        value(
            m,
            "ctxbudget_compactions_total",
            trigger="context_overflow",
            strategy="summarize",
        )
        == 1
    )
    assert value(m, "ctxbudget_silent_truncations_total", kind="reply") == 0


def test_silent_truncations_are_counted_by_kind(qwen3: RequestCounter) -> None:
    m = GatewayMetrics()
    session = BudgetSession(
        window=8192,
        counter=qwen3,
        max_output_tokens=512,
        summarizer=Summarizer(),
        on_event=m.on_session_event,
    )
    replies = iter([Reply(Usage(input_tokens=1900, output_tokens=148), "length")])

    def read(result: Any) -> Reply | None:
        return next(replies, None)

    hello = Request(messages=long_conversation(words=5, turns=1).messages)
    session.run(hello, lambda sent: "ok", reply=read, new_turn=True)  # a reply cut short
    # A prompt the server cut (Ollama) is found by `check_truncation`; its event is this one.
    session.silent_overflow(SilentOverflow(limit=1024, reason="cut"), 1024, "truncated")
    assert value(m, "ctxbudget_silent_truncations_total", kind="reply") == 1
    assert value(m, "ctxbudget_silent_truncations_total", kind="prompt") == 1
    assert value(m, "ctxbudget_overflow_errors_total") == 0
    assert value(m, "ctxbudget_overflow_recoveries_total") == 1  # the cut reply was resent
    assert value(m, "ctxbudget_window_adoptions_total") == 2


def test_capped_turns_are_counted() -> None:
    m = GatewayMetrics()
    m.on_session_event("capped", {"tokens": 9000, "cap": 3})
    m.on_session_event("usage", {"input_tokens": 9000})  # not a metric: ignored
    assert value(m, "ctxbudget_compactions_capped_total") == 1


def test_chained_sinks_hear_every_event() -> None:
    m = GatewayMetrics()
    heard: list[str] = []
    sink = chain_sinks(m.on_session_event, None, lambda kind, data: heard.append(kind))
    sink("compaction", {"trigger": "context_pressure", "strategy": "layered"})
    assert heard == ["compaction"]
    assert (
        value(m, "ctxbudget_compactions_total", trigger="context_pressure", strategy="layered") == 1
    )


def test_the_route_serves_the_exposition() -> None:
    m = GatewayMetrics()
    m.request("chat", "floor")
    with TestClient(Starlette(routes=[metrics_route(m)])) as client:
        reply = client.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(reply.text)}
    expected = {
        "ctxbudget_requests": "counter",
        "ctxbudget_compactions": "counter",
        "ctxbudget_overflow_errors": "counter",
        "ctxbudget_silent_truncations": "counter",
        "ctxbudget_overflow_recoveries": "counter",
        "ctxbudget_tokens_received": "counter",
        "ctxbudget_tokens_forwarded": "counter",
        "ctxbudget_upstream_latency_seconds": "histogram",
        "ctxbudget_gateway_overhead_seconds": "histogram",
        "ctxbudget_conversations": "gauge",
    }
    assert {name: families[name].type for name in expected} == expected
    floor = [s for s in families["ctxbudget_requests"].samples if s.labels.get("outcome")]
    assert [(s.labels, s.value) for s in floor] == [({"api": "chat", "outcome": "floor"}, 1.0)]


def test_a_timer_splits_upstream_time_from_overhead() -> None:
    m = GatewayMetrics()
    timer = m.timer("chat")
    with timer.upstream():
        time.sleep(0.05)
    time.sleep(0.01)  # the gateway's own work
    timer.begin_upstream()  # a stream: opened here, read elsewhere
    time.sleep(0.02)
    timer.end_upstream()
    timer.end_upstream()  # a second end adds nothing
    first = timer.done("compacted", received=9_000, forwarded=3_000)
    again = timer.done("ok")  # a stream's finally after the handler's own call
    assert again is first
    assert 70 <= first.upstream_ms < first.duration_ms
    assert first.overhead_ms == pytest.approx(first.duration_ms - first.upstream_ms)
    assert first.overhead_ms >= 10  # the gateway's own 10 ms
    assert value(m, "ctxbudget_requests_total", api="chat", outcome="compacted") == 1
    assert value(m, "ctxbudget_requests_total", api="chat", outcome="ok") == 0
    assert value(m, "ctxbudget_tokens_forwarded_total", api="chat") == 3_000
    latency = value(m, "ctxbudget_upstream_latency_seconds_sum", api="chat")
    assert latency == pytest.approx(first.upstream_ms / 1000)
    assert value(m, "ctxbudget_gateway_overhead_seconds_count", api="chat") == 1


def test_a_request_refused_before_the_upstream_has_no_upstream_time() -> None:
    m = GatewayMetrics()
    m.timer("chat").done("client_error")
    assert value(m, "ctxbudget_upstream_latency_seconds_count", api="chat") == 0
    assert value(m, "ctxbudget_gateway_overhead_seconds_count", api="chat") == 1


def test_upstream_time_that_raised_still_counts() -> None:
    m = GatewayMetrics()
    timer = m.timer("chat")
    timer.begin_upstream()  # the open raised: no end_upstream came
    time.sleep(0.02)
    timing = timer.done("upstream_error")
    assert timing.upstream_ms >= 20
    assert value(m, "ctxbudget_upstream_latency_seconds_count", api="chat") == 1
