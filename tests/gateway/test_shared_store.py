"""Two gateway instances on one Redis (``--state redis://...``, ``make test-redis``): a
conversation whose requests alternate between them is compacted once per compaction (one
summary each, whichever instance made it) and both forward the same compacted view."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from tests.gateway.recording_upstream import TOKENIZER, Upstream
from tests.redis_server import running_redis

from ctxbudget.agent.session_store import RedisSessionStore, open_store
from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.gateway.app import Gateway, create_app
from ctxbudget.gateway.config import GatewayConfig

pytestmark = pytest.mark.redis

WINDOW = 2_048


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with running_redis(tmp_path / "redis") as url:
        yield url


def _instance(tmp_path: Path, name: str, url: str, upstream: Upstream) -> TestClient:
    config = GatewayConfig(
        upstream="http://upstream.invalid/v1",
        window=WINDOW,
        tokenizer=TOKENIZER,
        state=url,
        archive_dir=tmp_path / name / "archives",
    )
    return TestClient(create_app(config, transport=httpx.ASGITransport(app=upstream.app())))


def _gateway(client: TestClient) -> Gateway:
    gateway = client.app.state.gateway  # type: ignore[attr-defined]
    assert isinstance(gateway, Gateway)
    return gateway


def _summary_request(body: dict[str, Any]) -> bool:
    return bool(body["messages"]) and body["messages"][0]["content"] == SUMMARIZER_SYSTEM


def test_two_instances_share_one_conversation_and_its_compactions(
    tmp_path: Path, redis_url: str
) -> None:
    upstream = Upstream(window=WINDOW)
    with ExitStack() as stack:
        instances = [
            stack.enter_context(_instance(tmp_path, name, redis_url, upstream))
            for name in ("a", "b")
        ]
        assert all(isinstance(_gateway(c).store, RedisSessionStore) for c in instances)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
        replies = []
        forwarded: list[tuple[int, list[Any]]] = []  # (summaries so far, messages forwarded)
        for turn in range(40):
            messages.append({"role": "user", "content": f"Question {turn}: " + "word " * 80})
            reply = instances[turn % 2].post(
                "/v1/chat/completions", json={"model": "m", "messages": messages}
            )
            assert reply.status_code == 200, reply.text
            replies.append(reply)
            sent = [b for _, _, b in upstream.calls if not _summary_request(b)][-1]
            forwarded.append((upstream.summaries, sent["messages"]))
            messages.append(reply.json()["choices"][0]["message"])
        summary_calls = [_gateway(c).summary_calls for c in instances]
    (conversation,) = {r.headers["x-ctxbudget-conversation"] for r in replies}
    stored = open_store(redis_url).load(f"chat:{conversation}")
    assert stored is not None
    # Compacted more than once, by both instances between them, one summary each time.
    assert len(stored.compactions) >= 2
    assert upstream.summaries == sum(summary_calls) == len(stored.compactions)
    assert all(int(r.headers["x-ctxbudget-tokens"]) <= WINDOW for r in replies)
    # Between two compactions, each instance forwards what the other forwarded before (the
    # same compacted view), plus the newer messages.
    for (before, earlier), (after, later) in itertools.pairwise(forwarded):
        if before == after:
            assert later[: len(earlier)] == earlier


def test_the_same_request_at_both_instances_at_once_is_summarized_once(
    tmp_path: Path, redis_url: str
) -> None:
    # Both instances get the request that crosses the line at the same moment (a client that
    # retried on the other instance): one compacts under the shared lock, the other waits and
    # takes its compaction over.
    upstream = Upstream(window=WINDOW, summary_delay=0.5)
    with ExitStack() as stack:
        first, second = (
            stack.enter_context(_instance(tmp_path, name, redis_url, upstream))
            for name in ("a", "b")
        )
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
        for turn in range(40):
            messages.append({"role": "user", "content": f"Question {turn}: " + "word " * 80})
            body = {"model": "m", "messages": messages}
            assert first.post("/v1/chat/completions", json=body).status_code == 200
            if upstream.summaries:
                break
            messages.append({"role": "assistant", "content": "Fine."})
        # ``messages`` now crosses the line (its first request compacted it); start again on
        # a fresh conversation whose last request is the same size, sent to both at once.
        assert upstream.summaries == 1
        fresh = [{**m, "content": m["content"] + " (again)"} for m in messages]
        for client in (first, second):  # both know the conversation, short of its last request
            reply = client.post("/v1/chat/completions", json={"model": "m", "messages": fresh[:2]})
            assert reply.status_code == 200
        replies: list[httpx.Response] = []
        threads = [
            threading.Thread(
                target=lambda c=client: replies.append(
                    c.post("/v1/chat/completions", json={"model": "m", "messages": fresh})
                )
            )
            for client in (first, second)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert [r.status_code for r in replies] == [200, 200]
    assert upstream.summaries == 2  # the first conversation's, and one for the fresh one
    views = [b["messages"] for _, _, b in upstream.calls[-2:]]
    assert views[0] == views[1] and len(views[0]) < len(fresh)
