"""The gateway benchmarks' harness (bench/gateway.py): its loopback upstream counts and
records what reaches it exactly, enforces its window, spots summary calls, and speaks HTTP
as httpx does; the conversations it builds are counted right."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from tests.conftest import load_bench

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.counting import count_request
from ctxbudget.messages.openai import request_from_openai

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gateway.py"


@pytest.fixture(scope="module")
def gw() -> ModuleType:
    return load_bench("gateway")


@pytest.fixture(scope="module")
def template(gw: ModuleType) -> Any:
    return gw.build_template(4_000)


def exact(messages: list[dict[str, Any]]) -> int:
    total: int = count_request(
        request_from_openai({"messages": messages}), counter="o200k_base"
    ).total
    return total


def test_template_counts_are_exact_at_every_boundary_for_every_tag(
    gw: ModuleType, template: Any
) -> None:
    for n in template.ends[:4]:
        assert template.tokens[n] == exact(template.messages(gw.REFERENCE_TAG, n))
        assert template.tokens[n] == exact(template.messages("0004217", n))
    # conversations differ in their task and in every tool result (summary calls name theirs)
    a, b = (
        template.messages("0000001", template.ends[1]),
        template.messages("0000002", template.ends[1]),
    )
    assert a[0] == b[0] and a[1] != b[1]
    tools = [(x, y) for x, y in zip(a, b, strict=True) if x["role"] == "tool"]
    assert tools and all(x["content"] != y["content"] for x, y in tools)
    assert gw.TAG_RE.search(tools[0][1]["content"]).group(1) == "0000002"


def test_upstream_usage_is_the_exact_count_and_the_window_is_enforced(
    gw: ModuleType, template: Any
) -> None:
    n = template.ends[2]
    messages = template.messages("0000011", n)
    size = exact(messages)
    fits = gw.Upstream(window=size)
    status, _, payload = fits.chat({"model": "m", "messages": messages})
    assert status == 200
    assert orjson.loads(payload)["usage"]["prompt_tokens"] == size
    small = gw.Upstream(window=size - 1)
    status, _, payload = small.chat({"model": "m", "messages": messages})
    assert status == 400 and "maximum context length" in orjson.loads(payload)["error"]["message"]
    stats = small.stats.as_json()
    assert stats["over_window"] == 1 and stats["max_prompt"] == size and stats["chat"] == 0


def test_upstream_table_gives_the_same_count_without_counting(
    gw: ModuleType, template: Any
) -> None:
    upstream = gw.Upstream(window=10**6)
    upstream.table = {int(k): tuple(v) for k, v in gw._table(template).items()}
    n = template.ends[3]
    messages = template.messages("0000012", n)
    _, _, payload = upstream.chat({"model": "m", "messages": messages})
    assert orjson.loads(payload)["usage"]["prompt_tokens"] == template.tokens[n]
    assert upstream.stats.counted_exactly == 0
    # a changed conversation (as after a compaction) is counted, not looked up
    changed = [*messages[:-1], {**messages[-1], "content": "short"}]
    _, _, payload = upstream.chat({"model": "m", "messages": changed})
    assert orjson.loads(payload)["usage"]["prompt_tokens"] == exact(changed)
    assert upstream.stats.counted_exactly == 1


def test_upstream_records_summary_calls_by_conversation_and_their_duplicates(
    gw: ModuleType,
) -> None:
    upstream = gw.Upstream(window=10**6)
    summary = [
        {"role": "system", "content": SUMMARIZER_SYSTEM},
        {"role": "user", "content": "[bench conversation 0000007] a tool result"},
    ]
    for _ in range(2):
        status, _, payload = upstream.chat({"model": "m", "messages": summary})
        assert (
            status == 200 and "## Goal" in orjson.loads(payload)["choices"][0]["message"]["content"]
        )
    other = [summary[0], {**summary[1], "content": summary[1]["content"] + " more"}]
    upstream.chat({"model": "m", "messages": other})
    stats = upstream.stats.as_json()
    assert stats["summaries"] == 3 and stats["duplicate_summaries"] == 1
    assert stats["summaries_by_tag"] == {"0000007": 3} and stats["chat"] == 0


def test_upstream_streams_usage_only_when_asked(gw: ModuleType, template: Any) -> None:
    upstream = gw.Upstream(window=10**6)
    messages = template.messages("0000013", template.ends[0])
    _, ctype, with_usage = upstream.chat(
        {"messages": messages, "stream": True, "stream_options": {"include_usage": True}}
    )
    _, _, without = upstream.chat({"messages": messages, "stream": True})
    assert ctype == b"text/event-stream"
    events = [line[6:] for line in with_usage.split(b"\n\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    assert orjson.loads(events[-2])["usage"]["prompt_tokens"] == exact(messages)
    assert b'"usage"' not in without and without.endswith(b"data: [DONE]\n\n")


def test_upstream_serves_httpx_over_keep_alive_and_chunked_bodies(
    gw: ModuleType, template: Any
) -> None:
    import httpx

    messages = template.messages("0000014", template.ends[1])
    body = gw.chat_body(messages, stream=False)

    async def scenario() -> list[int]:
        upstream = gw.Upstream(window=10**6)
        server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        async with server, httpx.AsyncClient() as client:
            first = await client.post(url, content=body)
            second = await client.post(url, content=body)  # the same connection, kept alive

            async def chunks() -> Any:
                yield body[:1000]
                yield body[1000:]

            third = await client.post(url, content=chunks())  # chunked transfer encoding
            sizes = [r.json()["usage"]["prompt_tokens"] for r in (first, second, third)]
            stats = (await client.get(f"http://127.0.0.1:{port}/_bench/stats")).json()
            assert stats["requests"] == 3
            return sizes

    assert asyncio.run(scenario()) == [exact(messages)] * 3


def test_percentile_interpolates_between_ranks(gw: ModuleType) -> None:
    values = [float(v) for v in range(1, 101)]
    assert gw.percentile(values, 0.5) == pytest.approx(50.5)
    assert gw.percentile(values, 0.99) == pytest.approx(99.01)
    assert gw.percentile([3.0], 0.99) == 3.0
