"""Saved session states: the JSON form round-trips and refuses bad input in one line; the SQLite
store keeps states across store objects, threads and processes, privately; a restored session
reuses a compaction made before the restart instead of summarising the prefix again."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.agent.conversations import long_conversation
from tests.messages.message_strategies import openai_messages

from ctxbudget.agent.budget_session import (
    ArchivedPrefix,
    BudgetSession,
    CompactedPrefix,
    MemorySessionStore,
    SessionState,
    prefix_digest,
)
from ctxbudget.agent.events import CompactionRecord
from ctxbudget.agent.session_store import (
    SqliteSessionStore,
    default_state_path,
    state_from_json,
    state_to_json,
)
from ctxbudget.budget.rules import MAX_WINDOW, SessionEvidence
from ctxbudget.budget.usage import PromptGap
from ctxbudget.compaction.archive import Archive, load_archive
from ctxbudget.compaction.records import message_to_record
from ctxbudget.counting import RequestCounter
from ctxbudget.errors import CtxbudgetError, InputError
from ctxbudget.messages.model import Message, Request

# -- the JSON form --------------------------------------------------------------------------------

counts = st.integers(0, 2**63 - 1)
digests = st.from_regex(r"[0-9a-f]{40}", fullmatch=True)
triggers = st.sampled_from(["context_pressure", "context_overflow"])
states = st.builds(
    SessionState,
    window=st.integers(1, MAX_WINDOW),
    compaction_id=st.none() | st.text(max_size=12),
    compacted_at=st.none() | st.floats(0, 4e9, allow_nan=False),
    compactions=st.lists(
        st.builds(
            CompactionRecord,
            turn=counts,
            trigger=triggers,
            strategy=st.text(max_size=10),
            messages_before=counts,
            messages_after=counts,
            tokens_before=counts,
            tokens_after=counts,
        ),
        max_size=3,
    ).map(tuple),
    summaries=st.lists(st.text(max_size=20), max_size=3).map(tuple),
    overflows=counts,
    learned=st.builds(
        SessionEvidence, largest_reply=counts, largest_growth=counts, last_prompt=st.none() | counts
    ),
    max_request_tokens=counts,
    turn=counts,
    turn_compactions=counts,
    floor_checked=st.booleans(),
    whole_prompts=st.booleans(),
    passed_over=st.none() | st.builds(PromptGap, reported=counts, counted=counts),
    owed=st.none() | triggers,
    prefix=st.none()
    | st.builds(
        CompactedPrefix,
        length=counts,
        digest=digests,
        view=st.lists(openai_messages, max_size=4).map(tuple),
    ),
    archived=st.frozensets(digests, max_size=5),
    archived_prefix=st.none() | st.builds(ArchivedPrefix, length=counts, digest=digests),
)


@given(states)
def test_a_state_round_trips_through_its_json_form(state: SessionState) -> None:
    text = state_to_json(state)
    assert json.loads(text)["version"] == 2
    assert text.isascii()
    assert state_from_json(text) == state
    assert state_to_json(state_from_json(text)) == text  # stable: the same text again


def test_lone_surrogates_and_adapter_meta() -> None:
    """A lone surrogate (a tool's broken output) survives; the adapters' item keys are dropped
    (they map messages to one process's framework objects)."""
    view = (Message(role="user", content="a\ud800b", meta={"ctxbudget_part": 3, "x": 1}),)
    state = SessionState(window=100, summaries=("s\udfff",), prefix=_prefix(view))
    back = state_from_json(state_to_json(state))
    assert back.summaries == ("s\udfff",)
    assert back.prefix is not None
    assert back.prefix.view == (Message(role="user", content="a\ud800b", meta={"x": 1}),)


def _prefix(view: tuple[Message, ...]) -> CompactedPrefix:
    return CompactedPrefix(length=len(view) + 1, digest="0" * 40, view=view)


def _valid(**changes: object) -> str:
    obj = json.loads(state_to_json(SessionState(window=4096)))
    obj.update(changes)
    return json.dumps(obj, separators=(",", ":"))


HOSTILE = [
    ("not json {", "state: not JSON"),
    ("[1, 2]", "state: expected a JSON object, got list"),
    ('{"window": 10}', "state.version: missing"),
    (_valid(version=3), "state.version: unknown state version 3"),
    (_valid(version=True), "state.version: unknown state version True"),
    (_valid(version="1"), "state.version: unknown state version '1'"),
    (_valid(window=-5), "state.window must be positive, got -5"),
    (_valid(window=0), "state.window must be positive"),
    (_valid(window="4096"), "state.window must be a positive integer"),
    (_valid(window=10**12), "state.window must be at most 100,000,000"),
    (_valid(window=2.5), "state.window must be a whole number"),
    (_valid().replace('"window":4096', '"window":1e400'), "state.window must be a whole"),
    (_valid(overflows=-1), "state.overflows: expected a non-negative integer up to 2**63 - 1"),
    (_valid(overflows=10**30), "state.overflows: expected a non-negative integer up to 2**63"),
    (_valid(overflows="3"), "state.overflows: expected a non-negative integer, got str"),
    (_valid(turn=True), "state.turn: expected a non-negative integer, got bool"),
    (_valid().replace('"turn":0', '"turn":' + "9" * 5000), "state: not JSON"),
    ("[" * 100_000 + "]" * 100_000, "state: not JSON"),
    (_valid().replace('"compacted_at":null', '"compacted_at":NaN'), "state.compacted_at"),
    (_valid(compacted_at=-1), "state.compacted_at: expected a time in seconds, got -1"),
    (_valid(floor_checked=1), "state.floor_checked: expected true or false, got int"),
    (_valid(owed="now"), "state.owed: unknown trigger 'now'"),
    (_valid(summaries=[1]), "state.summaries[0]: expected a JSON string, got int"),
    (_valid(compactions=[{"turn": 1}]), "state.compactions[0].trigger: missing"),
    (_valid(learned={"largest_reply": -3}), "state.learned.largest_reply: expected"),
    (_valid(passed_over={"reported": 1}), "state.passed_over.counted: missing"),
    (_valid(archived=["ABC"]), "state.archived[0]: expected a 40-character hex digest"),
    (
        _valid(prefix={"length": 2, "digest": "0" * 40, "view": [{"role": "robot"}]}),
        "state.prefix.view[0].role: unknown role 'robot'",
    ),
    (_valid(prefix={"length": 2, "digest": "0" * 40}), "state.prefix.view: missing"),
    (_valid(extra=1), "state: unknown field 'extra' in a version-2 state"),
    (_valid(archived_prefix={"length": 2}), "state.archived_prefix.digest: missing"),
    (
        _valid(archived_prefix={"length": -1, "digest": "0" * 40}),
        "state.archived_prefix.length: expected a non-negative integer",
    ),
    (
        _valid(version=1, archived_prefix={"length": 1, "digest": "0" * 40}),
        "state: unknown field 'archived_prefix' in a version-1 state",
    ),
]


@pytest.mark.parametrize(("text", "said"), HOSTILE)
def test_bad_state_json_is_one_input_error_line(text: str, said: str) -> None:
    with pytest.raises(InputError) as caught:
        state_from_json(text)
    message = str(caught.value)
    assert said in message
    assert "\n" not in message and len(message) < 300


def test_a_state_over_the_size_cap_is_refused_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxbudget.agent.session_store as module

    monkeypatch.setattr(module, "MAX_STATE_CHARS", 1000)
    big = SessionState(window=10, summaries=("x" * 2000,))
    with pytest.raises(InputError, match="over the 1,000 a store keeps"):
        state_to_json(big)
    with pytest.raises(InputError, match="over the 1,000 a state may have"):
        state_from_json('{"version": 1, "window": 10, "summaries": ["' + "x" * 2000 + '"]}')


# -- the SQLite store -----------------------------------------------------------------------------


def _state(n: int) -> SessionState:
    return SessionState(window=1000 + n, overflows=n, summaries=(f"summary {n}",), turn=n)


def test_a_state_saved_is_loaded_by_a_fresh_store_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state.sqlite3"
    state = SessionState(
        window=4096,
        compactions=(
            CompactionRecord(
                turn=1,
                trigger="context_pressure",
                strategy="layered",
                messages_before=40,
                messages_after=5,
                tokens_before=3000,
                tokens_after=900,
            ),
        ),
        prefix=_prefix((Message(role="assistant", content="summary"),)),
        archived=frozenset({"a" * 40}),
    )
    with SqliteSessionStore(path) as store:
        assert store.load("conv") is None
        store.save("conv", _state(1))
        store.save("conv", state)  # replaces
        store.save("other", _state(2))
    with SqliteSessionStore(path) as again:
        assert again.load("conv") == state
        assert again.load("other") == _state(2)
        assert again.keys() == ["conv", "other"]
        # NORMAL (1): a commit is not fsynced (the WAL is, at checkpoints); FULL (2) was one
        # fsync a request on the gateway's path.
        assert again._db.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_state_file_and_its_wal_are_private_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    old = os.umask(0)  # SQLite alone would create the file 0644 less the umask: here 0666
    try:
        with SqliteSessionStore(path) as store:
            store.save("conv", _state(1))
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert modes["state.sqlite3"] == 0o600
    assert modes["state.sqlite3-wal"] == 0o600  # SQLite copies the database file's mode
    assert all(mode == 0o600 for mode in modes.values()), modes


def test_a_state_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    SqliteSessionStore(path).close()
    path.chmod(0o644)
    with pytest.raises(InputError) as caught:
        SqliteSessionStore(path)
    assert str(caught.value) == (
        f"{path}: the state store is open to other users (mode 644); run chmod 600 {path}"
    )


@pytest.mark.parametrize(
    "content",
    [b"this is not a database, " * 200, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["text", "torn-header"],
)
def test_a_corrupt_state_file_is_one_line_naming_it(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.sqlite3"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(InputError) as caught:
        SqliteSessionStore(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a ctxbudget state store (")
    assert "\n" not in message


def test_another_programs_database_and_a_corrupt_row_are_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE session_state (id INTEGER)")
    other.chmod(0o600)
    with pytest.raises(InputError, match=r"not a ctxbudget state store \(no such column"):
        SqliteSessionStore(other)

    path = tmp_path / "state.sqlite3"
    SqliteSessionStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO session_state VALUES ('conv', '{\"version\": 1}', 0)")
    with SqliteSessionStore(path) as store, pytest.raises(InputError) as caught:
        store.load("conv")
    assert str(caught.value) == f"{path}['conv'].window: missing"


def test_a_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(CtxbudgetError, match=r"state store .* is a directory"):
        SqliteSessionStore(tmp_path)


def test_eight_threads_on_two_store_objects_lose_no_save(tmp_path: Path) -> None:
    """Two store objects (two connections, so SQLite's own locking between them as between
    processes), eight threads saving 25 states each: every one is there afterwards."""
    path = tmp_path / "state.sqlite3"
    stores = [SqliteSessionStore(path), SqliteSessionStore(path)]
    errors: list[BaseException] = []

    def save(worker: int) -> None:
        try:
            for i in range(25):
                n = worker * 100 + i
                stores[n % 2].save(f"conv-{n}", _state(n))
                stores[(n + 1) % 2].save("shared", _state(n))  # all write one row too
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()
    assert errors == []
    with SqliteSessionStore(path) as fresh:
        expected = {f"conv-{w * 100 + i}" for w in range(8) for i in range(25)}
        assert set(fresh.keys()) == expected | {"shared"}
        for key in expected:
            assert fresh.load(key) == _state(int(key.removeprefix("conv-")))
        shared = fresh.load("shared")
        assert shared is not None and shared in {_state(n) for n in range(800)}


WRITER = """
import sys
from ctxbudget.agent.budget_session import SessionState
from ctxbudget.agent.session_store import SqliteSessionStore

path, worker = sys.argv[1], int(sys.argv[2])
with SqliteSessionStore(path) as store:
    for i in range(50):
        n = worker * 100 + i
        store.save(f"conv-{n}", SessionState(window=1000 + n, overflows=n))
        store.save("shared", SessionState(window=1000 + n, overflows=n))
"""


def test_three_processes_saving_at_once_lose_nothing(tmp_path: Path) -> None:
    """SQLite's file locks (and the busy timeout) between processes: three writers, one file."""
    path = tmp_path / "state.sqlite3"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writers = [
        subprocess.Popen([sys.executable, str(script), str(path), str(w)], stderr=subprocess.PIPE)
        for w in range(3)
    ]
    errors = [w.communicate(timeout=120)[1].decode()[-2000:] for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0], errors
    with SqliteSessionStore(path) as store:
        assert len(store.keys()) == 3 * 50 + 1
        for w in range(3):
            for i in range(50):
                n = w * 100 + i
                assert store.load(f"conv-{n}") == SessionState(window=1000 + n, overflows=n)


def test_the_default_path_is_under_the_user_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_state_path() == tmp_path / "cache" / "ctxbudget" / "state.sqlite3"
    with SqliteSessionStore() as store:
        store.save("conv", _state(3))
    assert stat.S_IMODE(default_state_path().stat().st_mode) == 0o600
    assert stat.S_IMODE(default_state_path().parent.stat().st_mode) == 0o700


# -- a restart: the stored compaction is reused ----------------------------------------------------


class CountingSummarizer:
    """A scripted summarizer that counts its calls; its window holds any fold (one call a
    compaction)."""

    window = 131_072

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: Request) -> str:
        self.calls += 1
        return "The user discussed many topics; nothing is pending."


# The second half of the conversation, in a new process: the session is restored from the file
# and sent the whole conversation again plus a reply and a new question (as a gateway's client
# resends its whole list). A session not restored is asked the same, for comparison.
CHILD = """
import json, sys
from ctxbudget.agent.budget_session import BudgetSession
from ctxbudget.agent.session_store import SqliteSessionStore
from ctxbudget.compaction.records import message_from_record, message_to_record
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Message, Request

class CountingSummarizer:
    calls = 0
    window = 131_072
    def summarize(self, request):
        self.calls += 1
        return "The user discussed many topics; nothing is pending."

path, conversation = sys.argv[1], json.load(open(sys.argv[2]))
messages = [message_from_record(m) for m in conversation]
messages += [Message(role="assistant", content="Nothing."), Message(role="user", content="ok?")]
request = Request(system="Be brief.", messages=tuple(messages), max_output_tokens=256)
counter = RequestCounter("qwen3")
out = {}
for name in ("restored", "fresh"):
    summarizer = CountingSummarizer()
    session = BudgetSession(window=2048, counter=counter, summarizer=summarizer,
                            strategy="summarize")
    if name == "restored":
        with SqliteSessionStore(path) as store:
            assert session.restore(store, "conv")
    sent = session.prepare(request, new_turn=True)
    out[name] = {"calls": summarizer.calls, "compactions": len(session.compactions),
                 "sent": [message_to_record(m) for m in sent.messages]}
print(json.dumps(out))
"""


def test_a_restarted_session_reuses_the_stored_compaction(
    tmp_path: Path, qwen3: RequestCounter
) -> None:
    summarizer = CountingSummarizer()
    session = BudgetSession(window=2048, counter=qwen3, summarizer=summarizer, strategy="summarize")
    request = long_conversation()
    view = session.prepare(request, new_turn=True).messages
    assert summarizer.calls == 1 and len(view) < len(request.messages)
    path = tmp_path / "state.sqlite3"
    with SqliteSessionStore(path) as store:
        session.save(store, "conv")

    conversation = tmp_path / "conversation.json"
    conversation.write_text(json.dumps([message_to_record(m) for m in request.messages]))
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run(
        [sys.executable, str(script), str(path), str(conversation)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["fresh"]["calls"] == 1  # the new request does need a compaction
    restored = out["restored"]
    assert restored["calls"] == 0  # ... which the restored session already made
    assert restored["compactions"] == 1
    assert restored["sent"][: len(view)] == [message_to_record(m) for m in view]
    assert len(restored["sent"]) == len(view) + 2


def test_a_prefix_is_recognised_without_its_usage_and_meta(qwen3: RequestCounter) -> None:
    """The prefix digest is the archive's message identity: a framework that hands the list back
    without usage or meta still gets the stored view."""
    request = long_conversation()
    stripped = tuple(Message(role=m.role, content=m.content) for m in request.messages)
    tagged = tuple(
        Message(role=m.role, content=m.content, meta={"ctxbudget_source": i})
        for i, m in enumerate(request.messages)
    )
    assert prefix_digest(stripped) == prefix_digest(tagged)
    assert prefix_digest(stripped) != prefix_digest(stripped[:-1])


def test_a_restored_session_does_not_archive_its_messages_again(
    tmp_path: Path, qwen3: RequestCounter
) -> None:
    request = long_conversation(words=5, turns=3)
    with Archive(tmp_path / "a.jsonl") as archive:
        live = BudgetSession(window=100_000, counter=qwen3, archive=archive)
        live.prepare(request)
        state = state_from_json(state_to_json(live.snapshot()))
    assert len(load_archive(tmp_path / "a.jsonl").history) == len(request.messages)

    store = MemorySessionStore()
    store.save("conv", state)
    with Archive(tmp_path / "a.jsonl") as archive:
        restored = BudgetSession(window=100_000, counter=qwen3, archive=archive)
        assert restored.restore(store, "conv")
        more = Message(role="user", content="more")
        restored.prepare(request.with_messages((*request.messages, more)))
    history = load_archive(tmp_path / "a.jsonl").history
    assert len(history) == len(request.messages) + 1  # only the new message


def test_a_restored_session_matches_by_digest_and_leaves_a_view_alone(
    qwen3: RequestCounter,
) -> None:
    """Restored, a session knows the prefix by its digest only: the prefix handed back with
    other meta gets the view; a request that already starts with the view is sent as it is."""
    summarizer = CountingSummarizer()
    options: dict[str, Any] = {
        "window": 2048,
        "counter": qwen3,
        "summarizer": summarizer,
        "strategy": "summarize",
    }
    live = BudgetSession(**options)
    request = long_conversation()
    view = live.prepare(request, new_turn=True).messages
    store = MemorySessionStore()
    store.save("conv", state_from_json(state_to_json(live.snapshot())))

    more = (Message(role="assistant", content="Nothing."), Message(role="user", content="ok?"))
    tagged = tuple(
        Message(role=m.role, content=m.content, meta={"ctxbudget_source": i})
        for i, m in enumerate(request.messages)
    )
    for messages in ((*tagged, *more), (*view, *more)):
        restored = BudgetSession(**options)
        assert restored.restore(store, "conv")
        sent = restored.prepare(request.with_messages(messages), new_turn=True)
        assert sent.messages == (*view, *more)
    assert summarizer.calls == 1  # the live session's one compaction


# -- what a save writes, and what a load parses ---------------------------------------------------


def test_an_unchanged_state_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway loads a conversation's state before each of its requests (another instance
    may have compacted it): the same text is not parsed again, a changed one is."""
    import ctxbudget.agent.session_store as module

    parsed: list[object] = []
    real = module.state_from_json

    def counting(text: str | bytes, path: str = "state") -> SessionState:
        parsed.append(text)
        return real(text, path)

    monkeypatch.setattr(module, "state_from_json", counting)
    path = tmp_path / "state.sqlite3"
    with SqliteSessionStore(path) as store, SqliteSessionStore(path) as other:
        store.save("conv", _state(1))
        assert store.load("conv") == _state(1)
        assert store.load("conv") == _state(1)
        assert parsed == []  # the text this store wrote: known
        other.save("conv", _state(2))  # another process's save
        assert store.load("conv") == _state(2)
        assert store.load("conv") == _state(2)
        assert len(parsed) == 1


def test_a_version_1_state_loads_and_its_archived_messages_stay_archived_once(
    tmp_path: Path,
) -> None:
    """A state saved before version 2 listed every archived message's digest: it still loads,
    and a session restored from it does not archive those messages again."""
    from ctxbudget.agent import budget_session

    messages = [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}")
        for i in range(6)
    ]
    path = tmp_path / "a.jsonl"
    counter = RequestCounter("o200k_base")
    with Archive(path) as archive:
        first = BudgetSession(window=8_192, counter=counter, archive=archive)
        first.observe(messages)
        obj = json.loads(state_to_json(first.snapshot()))
    obj["version"] = 1
    del obj["archived_prefix"]
    obj["archived"] = sorted(budget_session._digest(m) for m in messages)
    state = state_from_json(json.dumps(obj))
    assert len(state.archived) == 6 and state.archived_prefix is None
    with Archive(path) as archive:
        restored = BudgetSession(window=8_192, counter=counter, archive=archive)
        restored.apply(state)
        # Saved again before it observes anything: the list is kept, not dropped.
        assert restored.snapshot().archived == state.archived
        restored.observe([*messages, Message(role="user", content="message 6")])
        again = restored.snapshot()
        assert again.archived == frozenset() and again.archived_prefix is not None
        assert again.archived_prefix.length == 7
    texts = [m.text for m in load_archive(path).history]
    assert texts == [f"message {i}" for i in range(7)]
