"""What a request of a known conversation costs the gateway after its reply, and when: the
archive fsync and the state save run once the reply is out (the conversation's next request
waits for them), and what they write does not grow with the conversation's history."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.gateway.recording_upstream import TOKENIZER, Upstream

from ctxbudget.agent.budget_session import SessionState
from ctxbudget.agent.session_store import SqliteSessionStore
from ctxbudget.compaction.archive import load_archive
from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.config import GatewayConfig

CHAT = "/v1/chat/completions"


def _config(tmp_path: Path) -> GatewayConfig:
    return GatewayConfig(
        upstream="http://upstream.invalid/v1",
        window=1_000_000,
        tokenizer=TOKENIZER,
        state=tmp_path / "state.sqlite3",
        archive_dir=tmp_path / "archives",
    )


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway.test", timeout=60
    )


def _step(messages: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
    """``messages`` plus a tool step, as an agent's next request has it."""
    return [
        *messages,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": "shell", "arguments": json.dumps({"cmd": f"ls {turn}"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"file_{turn}.py " * 20},
    ]


START: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
]


class GatedStore:
    """A SQLite store whose saves wait for ``gate``, recording whether a load ran while a save
    was under way."""

    def __init__(self, path: Path) -> None:
        self.inner = SqliteSessionStore(path)
        self.gate = threading.Event()
        self.gate.set()
        self.only: str | None = None
        """The one key whose saves wait at the gate (None: every key's)."""
        self.saving = 0
        self.saved = 0
        self.loads_while_saving = 0

    def load(self, key: str) -> SessionState | None:
        if self.saving:
            self.loads_while_saving += 1
        return self.inner.load(key)

    def save(self, key: str, state: SessionState) -> None:
        self.saving += 1
        try:
            if self.only is None or key == self.only:
                assert self.gate.wait(20), "the test never opened the gate"
            self.inner.save(key, state)
            self.saved += 1
        finally:
            self.saving -= 1

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("stream", [False, True])
def test_the_state_is_saved_after_the_reply_and_before_the_next_request(
    tmp_path: Path, stream: bool
) -> None:
    upstream = Upstream(window=1_000_000)
    store = GatedStore(tmp_path / "state.sqlite3")
    app = create_app(
        _config(tmp_path), transport=httpx.ASGITransport(app=upstream.app()), store=store
    )

    async def post(client: httpx.AsyncClient, messages: list[dict[str, Any]]) -> httpx.Response:
        body = {"model": "m", "messages": messages, "stream": stream}
        return await client.post(CHAT, json=body)

    async def go() -> None:
        async with _client(app) as client:
            first = await post(client, START)  # a new conversation: saved before its reply
            assert first.status_code == 200
            assert store.saved == 1
            store.gate.clear()
            second_list = _step(START, 1)
            try:
                # The reply comes while its save waits (it used to wait for the save).
                second = await asyncio.wait_for(post(client, second_list), 10)
                assert second.status_code == 200
                await asyncio.sleep(0.2)  # the save has started, and waits
                assert store.saving == 1 and store.saved == 1
                # The conversation's next request waits for that save before it looks up
                # anything: nothing reaches the upstream, nothing is loaded meanwhile.
                third = asyncio.create_task(post(client, _step(second_list, 2)))
                await asyncio.sleep(0.5)
                assert not third.done()
                assert len(upstream.calls) == 2
            finally:
                store.gate.set()
            assert (await third).status_code == 200
            assert len(upstream.calls) == 3
            headers = {r.headers["x-ctxbudget-conversation"] for r in (first, second)}
            assert headers == {(await third).headers["x-ctxbudget-conversation"]}
        await app.state.gateway.aclose()  # waits for the last save
        assert store.saved == 3
        assert store.loads_while_saving == 0

    asyncio.run(go())


def _row_length(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT key, length(json) FROM session_state").fetchall())


def test_what_a_step_writes_does_not_grow_with_the_history(tmp_path: Path) -> None:
    """The state saved after step N+1 of a long conversation is as large at step 60 as at
    step 10 (it listed every archived message's digest: ~43 bytes a message, every step)."""
    upstream = Upstream(window=1_000_000)
    app = create_app(_config(tmp_path), transport=httpx.ASGITransport(app=upstream.app()))
    sizes: dict[int, int] = {}

    async def go() -> None:
        messages = START
        async with _client(app) as client:
            for turn in range(1, 61):
                messages = _step(messages, turn)
                reply = await client.post(CHAT, json={"model": "m", "messages": messages})
                assert reply.status_code == 200
                conversations = await app.state.gateway.conversations()
                await conversations.settled()
                (size,) = _row_length(tmp_path / "state.sqlite3").values()
                sizes[turn] = size
        await app.state.gateway.aclose()

    asyncio.run(go())
    # 50 steps (100 messages) later: a few digits more in the numbers, not 100 digests.
    assert sizes[60] - sizes[10] < 200, sizes
    assert sizes[60] < 2_000, sizes


def test_a_restart_goes_on_without_archiving_a_message_twice(tmp_path: Path) -> None:
    upstream = Upstream(window=1_000_000)
    messages = START

    async def drive(turns: range) -> str:
        nonlocal messages
        app = create_app(_config(tmp_path), transport=httpx.ASGITransport(app=upstream.app()))
        async with _client(app) as client:
            for turn in turns:
                messages = _step(messages, turn)
                reply = await client.post(CHAT, json={"model": "m", "messages": messages})
                assert reply.status_code == 200
        await app.state.gateway.aclose()
        return str(reply.headers["x-ctxbudget-conversation"])

    before = asyncio.run(drive(range(1, 11)))
    with sqlite3.connect(tmp_path / "state.sqlite3") as db:
        (saved,) = db.execute("SELECT json FROM session_state").fetchone()
    state = json.loads(saved)
    assert state["version"] == 2 and "archived" not in state
    assert state["archived_prefix"]["length"] == len(messages) - 1  # the system is not one
    after = asyncio.run(drive(range(11, 14)))
    assert after == before  # the same conversation, resumed from the store
    (path,) = (tmp_path / "archives").glob("*.jsonl")
    texts = [m.text for m in load_archive(path).history if m.role == "tool"]
    assert texts == [f"file_{turn}.py " * 20 for turn in range(1, 14)]  # each once, in order


def test_a_state_one_reply_behind_its_archive_archives_nothing_twice(tmp_path: Path) -> None:
    """A gateway killed after a reply, before that reply's state was saved, restarts from the
    state before it; what its archive already holds is not archived again."""
    upstream = Upstream(window=1_000_000)
    messages = START
    state_path = tmp_path / "state.sqlite3"

    async def drive(turns: range, *, keep_before_last: bool = False) -> str | None:
        nonlocal messages
        app = create_app(_config(tmp_path), transport=httpx.ASGITransport(app=upstream.app()))
        kept = None
        async with _client(app) as client:
            for turn in turns:
                if keep_before_last and turn == turns[-1]:
                    with sqlite3.connect(state_path) as db:
                        (kept,) = db.execute("SELECT json FROM session_state").fetchone()
                messages = _step(messages, turn)
                reply = await client.post(CHAT, json={"model": "m", "messages": messages})
                assert reply.status_code == 200
                await (await app.state.gateway.conversations()).settled()
        await app.state.gateway.aclose()
        return kept

    kept = asyncio.run(drive(range(1, 11), keep_before_last=True))
    with sqlite3.connect(state_path) as db:  # as if killed before step 10's save
        db.execute("UPDATE session_state SET json = ?", (kept,))
    asyncio.run(drive(range(11, 13)))
    (path,) = (tmp_path / "archives").glob("*.jsonl")
    texts = [m.text for m in load_archive(path).history if m.role == "tool"]
    assert texts == [f"file_{turn}.py " * 20 for turn in range(1, 13)]


def test_start_up_takes_its_objects_out_of_the_collectors_walks(tmp_path: Path) -> None:
    """A full garbage collection walked every object alive since start-up (~30 ms with the
    GIL held, a pause in whichever request it fell on): the gateway freezes them once started."""
    script = f"""
import gc
from pathlib import Path
from starlette.testclient import TestClient
from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.config import GatewayConfig
config = GatewayConfig(upstream="mock", window=8192, state=Path({str(tmp_path / "s.db")!r}))
before = gc.get_freeze_count()
with TestClient(create_app(config)):
    print(before, gc.get_freeze_count())
"""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    before, after = map(int, done.stdout.split())
    assert before == 0
    assert after > 20_000  # the imports' objects: out of every later full collection


def test_a_conversation_dropped_from_memory_keeps_its_archive_open_until_saved(
    tmp_path: Path,
) -> None:
    """A conversation evicted (more live ones than the cap) while its save is pending: its
    archive is closed once that save (its fsync first) is done, not under it."""
    upstream = Upstream(window=1_000_000)
    store = GatedStore(tmp_path / "state.sqlite3")
    config = dataclasses.replace(_config(tmp_path), max_live_conversations=1)
    app = create_app(config, transport=httpx.ASGITransport(app=upstream.app()), store=store)

    async def go() -> None:
        async with _client(app) as client:
            first = _step(START, 1)
            assert (await client.post(CHAT, json={"model": "m", "messages": first})).is_success
            conversations = await app.state.gateway.conversations()
            (evicted,) = conversations.status()
            store.only = f"chat:{evicted['id']}"
            store.gate.clear()
            try:
                second = _step(first, 2)  # its save waits at the gate
                reply = await client.post(CHAT, json={"model": "m", "messages": second})
                assert reply.is_success
                other = [{"role": "user", "content": "Another task."}]
                reply = await client.post(CHAT, json={"model": "m", "messages": other})
                assert reply.is_success and len(conversations) == 1  # the first one evicted
                assert store.saving == 1  # the first conversation's, at the gate
                (archive_path,) = [
                    p for p in (tmp_path / "archives").glob("*.jsonl") if evicted["id"] in p.name
                ]
                assert _held(archive_path)  # still open: its save has not run
            finally:
                store.gate.set()
            await conversations.settled()
            assert not _held(archive_path)  # closed once saved
        await app.state.gateway.aclose()

    asyncio.run(go())


def _held(path: Path) -> bool:
    """True while an `Archive` holds ``path`` open (it keeps an exclusive lock on it)."""
    from ctxbudget.compaction.archive import Archive, ArchiveInUseError

    try:
        Archive(path, sync_each_record=False).close()
    except ArchiveInUseError:
        return True
    return False
