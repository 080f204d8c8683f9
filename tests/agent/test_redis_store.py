"""The shared state store on a real redis-server (``make test-redis``): states round-trip and
expire after their idle time; several instances (separate processes) on one Redis compact a
conversation's prefix once and show the same compacted view; a lock holder killed mid-compaction
frees the lock after its time to live; a Redis that goes away is one error line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from tests.agent.conversations import SlowSummarizer, long_conversation
from tests.redis_server import running_redis

from ctxbudget.agent.budget_session import BudgetSession, CompactedPrefix, SessionState
from ctxbudget.agent.events import CompactionRecord
from ctxbudget.agent.session_store import RedisSessionStore, open_store, state_to_json
from ctxbudget.compaction.records import message_to_record
from ctxbudget.counting import RequestCounter
from ctxbudget.errors import ArchiveError, InputError
from ctxbudget.messages.model import Message, Request

pytestmark = pytest.mark.redis

INSTANCE = Path(__file__).with_name("store_instance.py")
SRC = str(Path(__file__).resolve().parents[2] / "src")
REPLY_TIMEOUT_S = 60.0


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with running_redis(tmp_path / "redis") as url:
        yield url


# -- the store itself ------------------------------------------------------------------------------


def _full_state() -> SessionState:
    view = (
        Message(role="assistant", content="Summary: the user asked about \ud800 and more."),
        Message(role="user", content="and now?", meta={"x": 1}),
    )
    return SessionState(
        window=4096,
        compaction_id="c1-abc",
        compacted_at=1_700_000_000.5,
        compactions=(
            CompactionRecord(
                turn=1,
                trigger="context_pressure",
                strategy="summarize",
                messages_before=61,
                messages_after=2,
                tokens_before=3000,
                tokens_after=400,
            ),
        ),
        summaries=("Summary: the user asked about \ud800 and more.",),
        overflows=1,
        turn=3,
        prefix=CompactedPrefix(length=61, digest="a" * 40, view=view),
        archived=frozenset({"b" * 40}),
    )


def test_a_state_round_trips_between_two_store_objects(redis_url: str) -> None:
    """Saved by one instance's store, loaded equal by another's; keys listed; replaced whole."""
    state = _full_state()
    first = open_store(redis_url)
    assert isinstance(first, RedisSessionStore)
    with first, RedisSessionStore(redis_url) as second:
        assert second.load("conv") is None
        first.save("conv", SessionState(window=1000))
        first.save("conv", state)
        first.save("other [*] key", SessionState(window=2000))
        assert second.load("conv") == state
        assert second.load("other [*] key") == SessionState(window=2000)
        assert second.keys() == ["conv", "other [*] key"]
        raw = second._client.get("ctxbudget:state:conv")
        assert raw == state_to_json(state).encode("ascii")  # the versioned JSON form as it is


def test_a_corrupt_stored_state_is_one_input_error_line(redis_url: str) -> None:
    with RedisSessionStore(redis_url) as store:
        store._client.set("ctxbudget:state:conv", b'{"version": 1}')
        with pytest.raises(InputError) as caught:
            store.load("conv")
    port = redis_url.split(":")[2].split("/")[0]
    assert str(caught.value) == f"redis://127.0.0.1:{port}/0['conv'].window: missing"


def test_a_state_expires_after_its_idle_time_and_use_renews_it(redis_url: str) -> None:
    with RedisSessionStore(redis_url, idle_ttl=2.0) as store:
        store.save("conv", SessionState(window=1000))
        assert 0 < store._client.pttl("ctxbudget:state:conv") <= 2000
        for _ in range(3):  # each load starts the idle time again: 2.7 s in all, still there
            time.sleep(0.9)
            assert store.load("conv") == SessionState(window=1000)
        time.sleep(2.5)
        assert store.load("conv") is None
        assert store.keys() == []


def test_idle_time_and_lock_options_come_from_the_url(redis_url: str) -> None:
    store = open_store(redis_url + "?idle_ttl=2.5&lock_ttl=4&lock_wait=0")
    assert isinstance(store, RedisSessionStore)
    with store:
        assert (store.idle_ttl, store.lock_ttl, store.lock_wait) == (2.5, 4.0, 0.0)
        store.save("conv", SessionState(window=1000))
        assert 1000 < store._client.pttl("ctxbudget:state:conv") <= 2500
        with store.lock("conv") as held:
            assert held
            assert 2000 < store._client.pttl("ctxbudget:lock:conv") <= 4000
            with store.lock("conv") as again:  # lock_wait=0: one try
                assert again is False
        assert store._client.exists("ctxbudget:lock:conv") == 0  # released


def test_a_held_lock_is_renewed_past_its_time_to_live(redis_url: str) -> None:
    """A live holder keeps its lock (a long summary is not summarised twice): held for 2.5 times
    the lock's time to live, another store's try still fails."""
    with (
        RedisSessionStore(redis_url, lock_ttl=1.0, lock_wait=0) as mine,
        RedisSessionStore(redis_url, lock_ttl=1.0, lock_wait=0) as theirs,
    ):
        with mine.lock("conv") as held:
            assert held
            time.sleep(2.5)
            with theirs.lock("conv") as other:
                assert other is False
        with theirs.lock("conv") as other:
            assert other is True


# -- a Redis that is down or goes away -------------------------------------------------------------


def test_a_redis_that_stops_is_one_archive_error_line(tmp_path: Path) -> None:
    with running_redis(tmp_path / "redis") as url:
        store = RedisSessionStore(url)
        store.save("conv", SessionState(window=1000))
    started = time.monotonic()
    for act in (lambda: store.load("conv"), lambda: store.save("conv", SessionState(window=9))):
        with pytest.raises(ArchiveError) as caught:
            act()
        message = str(caught.value)
        assert message.startswith(url + ": cannot ")
        assert "onnect" in message and "\n" not in message
    assert time.monotonic() - started < 10


# -- instances in separate processes ---------------------------------------------------------------


class Instance:
    """A child process running tests/agent/store_instance.py: one gateway instance."""

    def __init__(self, spec: str, name: str, delay: float = 0.0) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(INSTANCE), spec, name, str(delay)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        self.lines: list[dict[str, Any]] = []
        self._ready = threading.Event()
        self._arrived = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        for line in stdout:
            with self._arrived:
                self.lines.append(json.loads(line))
                self._arrived.notify_all()
        with self._arrived:
            self._arrived.notify_all()

    def wait_for(self, key: str, count: int = 1) -> dict[str, Any]:
        """The ``count``-th line that has ``key``; fails with the child's stderr after a while."""
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        with self._arrived:
            while True:
                found = [line for line in self.lines if key in line]
                if len(found) >= count:
                    return found[count - 1]
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    break
                self._arrived.wait(min(left, 0.5))
        self.process.kill()
        stderr = self.process.stderr.read() if self.process.stderr else ""
        pytest.fail(f"instance {self.name}: no {key!r} line; stderr: {stderr[-2000:]}")

    def send(self, request: Request) -> None:
        assert self.process.stdin is not None
        records = [message_to_record(m) for m in request.messages]
        self.process.stdin.write(json.dumps({"messages": records}) + "\n")
        self.process.stdin.flush()

    def ask(self, request: Request) -> dict[str, Any]:
        """Send ``request``; its reply (the sent view, this instance's summary calls so far)."""
        count = sum(1 for line in self.lines if "sent" in line)
        self.send(request)
        return self.wait_for("sent", count + 1)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def instances() -> Iterator[list[Instance]]:
    started: list[Instance] = []
    yield started
    for instance in started:
        instance.close()


def _start(instances: list[Instance], spec: str, name: str, delay: float = 0.0) -> Instance:
    instance = Instance(spec, name, delay)
    instances.append(instance)
    return instance


def _grow(request: Request, step: int) -> Request:
    """The conversation one exchange later (the reply, then the next user message)."""
    return request.with_messages(
        (
            *request.messages,
            Message(role="assistant", content=f"noted {step}"),
            Message(role="user", content=f"topic {step}: " + "word " * 200),
        )
    )


def test_a_conversation_alternating_between_two_instances_is_compacted_once_each_time(
    redis_url: str, instances: list[Instance]
) -> None:
    """Requests alternate between instances a and b; after each, the same request lands on the
    other instance (a client retry behind a load balancer). Every compaction is one summary call
    in all, and both instances send the same compacted view."""
    a, b = _start(instances, redis_url, "a"), _start(instances, redis_url, "b")
    for instance in (a, b):
        instance.wait_for("ready")
    request = long_conversation(turns=4)
    for step in range(24):
        first, second = (a, b) if step % 2 == 0 else (b, a)
        sent = first.ask(request)
        retried = second.ask(request)
        assert retried["sent"] == sent["sent"], f"step {step}: two views of one conversation"
        request = _grow(request, step)
    with RedisSessionStore(redis_url) as store:
        state = store.load("conv")
    assert state is not None
    calls = a.lines[-1]["calls"] + b.lines[-1]["calls"]
    assert len(state.compactions) >= 3  # the conversation did need compacting, several times
    assert calls == len(state.compactions)  # ... once each, in all
    assert a.lines[-1]["calls"] >= 1 and b.lines[-1]["calls"] >= 1  # by both instances
    summaries = {line["sent"][0]["content"] for line in a.lines + b.lines if "sent" in line}
    assert {s for s in summaries if s.startswith("Summary")} <= set(state.summaries)


def test_eight_instances_compacting_one_prefix_at_once_summarise_it_once(
    redis_url: str, instances: list[Instance]
) -> None:
    """Eight processes get the same over-the-line request at once (the summary takes 0.5 s, so
    they all decide to compact before the first is done): one summary, one view."""
    fleet = [_start(instances, redis_url, f"i{n}", delay=0.5) for n in range(8)]
    for instance in fleet:
        instance.wait_for("ready")
    request = long_conversation()
    for instance in fleet:
        instance.send(request)
    replies = [instance.wait_for("sent") for instance in fleet]
    assert sum(reply["calls"] for reply in replies) == 1
    assert all(reply["sent"] == replies[0]["sent"] for reply in replies)  # one view
    assert len(replies[0]["sent"]) < len(request.messages)


def test_a_killed_lock_holder_frees_the_lock_after_its_time_to_live(
    redis_url: str, instances: list[Instance]
) -> None:
    """The holder is killed (SIGKILL) in the middle of its summary; the other instance, already
    waiting for the lock, gets it once the lock's time to live (2 s) has passed and compacts."""
    spec = redis_url + "?lock_ttl=2&lock_wait=30"
    holder = _start(instances, spec, "holder", delay=120)
    waiter = _start(instances, spec, "waiter")
    for instance in (holder, waiter):
        instance.wait_for("ready")
    request = long_conversation()
    holder.send(request)
    holder.wait_for("summarizing")
    waiter.send(request)
    time.sleep(3.0)  # past the lock's time to live: the holder's renewals keep it meanwhile
    assert not [line for line in waiter.lines if "sent" in line or "summarizing" in line]
    os.kill(holder.process.pid, signal.SIGKILL)
    killed = time.monotonic()
    reply = waiter.wait_for("sent")
    assert time.monotonic() - killed < 10
    assert reply["calls"] == 1
    assert len(reply["sent"]) < len(request.messages)
    with RedisSessionStore(redis_url) as store:
        state = store.load("conv")
    assert state is not None and len(state.summaries) == 1
    assert "Summary 1 by waiter:" in state.summaries[0]


def test_a_waiter_whose_wait_runs_out_goes_on_without_compacting(
    redis_url: str, qwen3: RequestCounter
) -> None:
    """A live holder still summarising after the other's ``lock_wait``: the other sends the
    request as it is (a ``lock_waited`` event), never a second summary."""
    slow, quick = SlowSummarizer(delay=3.0), SlowSummarizer(delay=0.0)
    events: list[str] = []
    request = long_conversation()
    with (
        RedisSessionStore(redis_url, lock_wait=30) as holder_store,
        RedisSessionStore(redis_url, lock_wait=0.5) as waiter_store,
    ):
        holder = BudgetSession(
            window=2048, counter=qwen3, summarizer=slow, strategy="summarize",
            store=holder_store, key="conv",
        )  # fmt: skip
        waiter = BudgetSession(
            window=2048, counter=qwen3, summarizer=quick, strategy="summarize",
            store=waiter_store, key="conv", on_event=lambda kind, data: events.append(kind),
        )  # fmt: skip
        thread = threading.Thread(target=holder.prepare, args=(request,))
        thread.start()
        assert slow.started.wait(30)
        sent = waiter.prepare(request)
        thread.join()
        assert sent.messages == request.messages  # as it came: not compacted
        assert (slow.calls, quick.calls) == (1, 0)
        assert "lock_waited" in events
        assert waiter_store.load("conv") == holder.snapshot()  # the holder saved its compaction
