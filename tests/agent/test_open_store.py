"""`open_store` and the compaction lock without a Redis server: a path is a SQLite store, a bad
``--state`` value or an unreachable Redis is one error line; sessions of one process sharing a
store compact a conversation once (the in-process lock)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.agent.conversations import SlowSummarizer, long_conversation
from tests.redis_server import free_port

import ctxbudget.agent.budget_session as budget_session
from ctxbudget.agent.budget_session import (
    BudgetSession,
    MemorySessionStore,
    SessionStore,
    process_lock,
)
from ctxbudget.agent.session_store import SqliteSessionStore, open_store
from ctxbudget.counting import RequestCounter
from ctxbudget.errors import ArchiveError, ConfigError, MissingDependencyError
from ctxbudget.messages.model import Request


def test_a_path_opens_a_sqlite_store(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "state.sqlite3"))
    assert isinstance(store, SqliteSessionStore)
    store.close()


BAD_SPECS = [
    ("", "--state: empty; pass a file path (SQLite) or redis://HOST:PORT/DB (shared)"),
    ("  ", "--state: empty;"),
    ("http://cache:6379/0", "--state http://cache:6379/0: unknown scheme 'http'; pass a file"),
    ("redis://cache:99999/0", "the port must be a number from 1 to 65535"),
    ("redis://cache:port/0", "the port must be a number from 1 to 65535"),
    ("redis://cache:6379/zero", "the database must be a number such as 0, got 'zero'"),
    ("redis:///0", "--state redis:///0: no host; expected redis://HOST:PORT/DB"),
    ("redis://cache/0?ttl=5", "unknown option 'ttl'; known: idle_ttl, lock_ttl, lock_wait"),
    ("redis://cache/0?idle_ttl=soon", "idle_ttl must be seconds, got 'soon'"),
    ("redis://cache/0?idle_ttl=-1", "idle_ttl must be seconds (more than 0), got -1.0"),
    ("redis://cache/0?lock_ttl=0", "lock_ttl must be seconds (more than 0), got 0.0"),
    ("redis://cache/0?lock_wait=nan", "lock_wait must be seconds (0 or more), got nan"),
    ("redis://cache/0?lock_wait=inf", "lock_wait must be seconds (0 or more), got inf"),
    ("redis://cache/0?idle_ttl=1e12", "idle_ttl must be at most a year in seconds"),
    ("redis://u:hunter2@cache/0?x=1", "--state redis://u:***@cache/0?x=1: unknown option 'x'"),
]


@pytest.mark.parametrize(("spec", "said"), BAD_SPECS)
def test_a_bad_state_spec_is_one_config_error_line(spec: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(spec)
    message = str(caught.value)
    assert said in message
    assert "\n" not in message and "hunter2" not in message


def test_an_unreachable_redis_is_one_archive_error_line_at_once() -> None:
    port = free_port()  # nobody listens there
    started = time.monotonic()
    with pytest.raises(ArchiveError) as caught:
        open_store(f"redis://:hunter2@127.0.0.1:{port}/0")
    message = str(caught.value)
    assert message.startswith(f"redis://127.0.0.1:{port}/0: cannot reach Redis (")
    assert message.endswith("; start it or pass another --state")
    assert "\n" not in message and "hunter2" not in message
    assert time.monotonic() - started < 5


def test_without_the_redis_package_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis raises ImportError
    with pytest.raises(MissingDependencyError) as caught:
        open_store("redis://127.0.0.1:6379/0")
    assert str(caught.value) == (
        "a redis:// state store needs the package 'ctxbudget[redis]': pip install ctxbudget[redis]"
    )


# -- the in-process compaction lock ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_sessions_of_one_process_sharing_a_store_compact_once(
    kind: str, tmp_path: Path, qwen3: RequestCounter
) -> None:
    """Four sessions (four requests of one conversation, as four gateway workers would hold), one
    store (for SQLite, four store objects on one file): one summary, one view for all."""
    summarizer = SlowSummarizer()
    stores: list[SessionStore] = (
        [MemorySessionStore()] * 4
        if kind == "memory"
        else [SqliteSessionStore(tmp_path / "state.sqlite3") for _ in range(4)]
    )
    sessions = [
        BudgetSession(
            window=2048,
            counter=qwen3,
            summarizer=summarizer,
            strategy="summarize",
            store=store,
            key="conv",
        )
        for store in stores
    ]
    request = long_conversation()
    views: list[Request] = []
    threads = [
        threading.Thread(target=lambda s=s: views.append(s.prepare(request))) for s in sessions
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert summarizer.calls == 1
    assert len(views) == 4 and all(v.messages == views[0].messages for v in views)
    assert len(views[0].messages) < len(request.messages)
    assert stores[0].load("conv") is not None
    assert budget_session._PROCESS_LOCKS._locks == {}  # nothing left behind


def test_a_stale_session_does_not_save_over_a_newer_compaction(qwen3: RequestCounter) -> None:
    """Two requests of one conversation at once on two instances: one compacts (and saves), the
    other, restored before that, ends later. Its save must not put back the state without the
    compaction, or the next request would summarise the prefix a second time."""
    store = MemorySessionStore()
    summarizer = SlowSummarizer(delay=0)
    options: dict[str, Any] = {
        "window": 2048,
        "counter": qwen3,
        "summarizer": summarizer,
        "strategy": "summarize",
        "store": store,
        "key": "conv",
    }
    compacting, other = BudgetSession(**options), BudgetSession(**options)
    request = long_conversation()
    short = request.with_messages(request.messages[:4])
    other.prepare(short)  # under the line: no compaction
    compacting.prepare(request)  # compacts, and saves under the lock
    assert summarizer.calls == 1
    saved = other.save(store, "conv")  # ends after the compaction: its state is older
    later = BudgetSession(**options)
    assert later.restore(store, "conv")
    later.prepare(request)
    assert summarizer.calls == 1  # the stored compaction was reused
    assert saved is False
    assert compacting.save(store, "conv") is True


def test_the_process_lock_is_given_up_after_its_wait() -> None:
    with process_lock("conv") as held:
        assert held
        outcome: list[bool] = []

        def other() -> None:
            with process_lock("conv", wait=0.1) as again:
                outcome.append(again)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert outcome == [False]
    with process_lock("conv", wait=0) as later:
        assert later


def test_a_store_without_a_key_is_refused(qwen3: RequestCounter) -> None:
    with pytest.raises(ConfigError, match="pass store and key together"):
        BudgetSession(window=2048, counter=qwen3, store=MemorySessionStore())
