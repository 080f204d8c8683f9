"""Saved session states: a stable JSON form of `SessionState`, and two `SessionStore` kinds over
it: an embedded SQLite file (the HTTP gateway's default) and Redis, shared by several gateway
instances (`RedisSessionStore`). `open_store` opens either from a ``--state`` value.

The JSON form is versioned (``"version": 2``; version 1, written before, is still read),
written with sorted keys and ASCII only (lone surrogates survive as escapes), and read back
strictly: every field is checked, unknown fields and versions are refused, and any problem is
one `InputError` line that names the field. The compacted prefix's view is stored as the
archive stores messages (`message_to_record`), less the adapters' ``ctxbudget_`` meta keys
(they map messages to one process's framework items). What is archived is two values
(``archived_prefix``: the length and digest of the list observed last), so what a request
writes does not grow with the history; version 1 listed every archived message's digest
(``archived``), still read.

Both stores keep the last state each key was saved or loaded with, by its JSON text
(`_StateMemo`): a load that reads the same text again (the gateway checks the store before each
request of a conversation, for another instance's compaction) is not parsed again, and a save
of the same compacted view does not serialise the view again.

The SQLite store. One table ``session_state(key, json, updated_at)`` in WAL mode. The file is
created 0600 (its directory 0700) before SQLite opens it; an existing file that others can read
is refused. Within a process, one connection behind a lock (a save or load is a few
milliseconds, so a lock costs nothing and keeps one connection's state simple); across
processes, SQLite's own file locking, with a busy timeout. Each save is one ``BEGIN IMMEDIATE``
transaction, so a reader sees the old state or the new one, never a mix.

The Redis store (the ``redis`` package, ``pip install 'ctxbudget[redis]'``). Each state is one
string key ``ctxbudget:state:KEY`` holding the same JSON, with a time to live (the idle time)
set again by every save and load, so a conversation left idle that long is forgotten and
nothing grows without bound. A conversation's compaction lock is ``ctxbudget:lock:KEY``: set
only when absent, with its own time to live (``SET NX PX``), renewed by its holder while it
compacts and released only with the holder's token (redis-py's `Lock`), so a holder killed
mid-compaction frees it after the lock's time to live and the others go on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ctxbudget.agent.budget_session import (
    DEFAULT_LOCK_WAIT_S,
    ArchivedPrefix,
    CompactedPrefix,
    SessionState,
    SessionStore,
    without_adapter_meta,
)
from ctxbudget.agent.events import CompactionRecord
from ctxbudget.budget.rules import SessionEvidence, validate_window
from ctxbudget.budget.usage import PromptGap
from ctxbudget.compaction.archive import MAX_RECORD_BYTES, user_cache_dir
from ctxbudget.compaction.archive_file import open_regular
from ctxbudget.compaction.records import message_from_record, message_to_record
from ctxbudget.errors import ArchiveError, ConfigError, InputError
from ctxbudget.extras import require
from ctxbudget.messages._checks import (
    as_list,
    as_object,
    as_str,
    choice,
    fail,
    join,
    required,
    shown,
    type_name,
)
from ctxbudget.messages.jsondepth import load_json

if TYPE_CHECKING:
    import redis

__all__ = [
    "DEFAULT_IDLE_TTL_S",
    "DEFAULT_LOCK_TTL_S",
    "STATE_VERSION",
    "RedisSessionStore",
    "SqliteSessionStore",
    "default_state_path",
    "open_store",
    "state_from_json",
    "state_to_json",
]

STATE_VERSION = 2
READ_VERSIONS = (1, 2)
"""Versions `state_from_json` reads: 1 listed every archived message (``archived``)."""
MAX_COUNT = 2**63 - 1
"""The largest count accepted: replay keeps counts as 8-byte integers; more is a corrupt file."""
MAX_STATE_CHARS = MAX_RECORD_BYTES
"""The longest state read or written, the archive's record cap (64 MiB)."""
BUSY_TIMEOUT_MS = 10_000
"""How long a save waits for another process's transaction before it is an error."""
DEFAULT_IDLE_TTL_S = 86_400.0
"""How long Redis keeps a conversation's state after its last save or load (a day: a state holds
up to a window of messages, and a forgotten conversation only costs one compaction again)."""
DEFAULT_LOCK_TTL_S = 30.0
"""How long a compaction lock outlives a holder that stopped renewing it (killed, cut off)."""
REDIS_TIMEOUT_S = 5.0
"""How long one Redis connect or command may take before it is an error (never a hang)."""
_REDIS_OPTIONS = ("idle_ttl", "lock_ttl", "lock_wait")
_TRIGGERS = ("context_pressure", "context_overflow")
_FIELDS = frozenset(
    {
        "version",
        "window",
        "compaction_id",
        "compacted_at",
        "compactions",
        "summaries",
        "overflows",
        "learned",
        "max_request_tokens",
        "turn",
        "turn_compactions",
        "floor_checked",
        "whole_prompts",
        "passed_over",
        "owed",
        "prefix",
        "archived",
        "archived_prefix",
    }
)
_SHA1_HEX = frozenset("0123456789abcdef")


# -- the JSON form ---------------------------------------------------------------------------------


def state_to_json(state: SessionState, *, view: list[Any] | None = None) -> str:
    """``state`` as version-2 JSON text (sorted keys, ASCII): `state_from_json` reads it back
    equal (the prefix view's ``ctxbudget_`` meta keys left out). ``view``: the prefix view's
    records when the caller has them already (`view_records`)."""
    prefix = state.prefix
    obj: dict[str, Any] = {
        "version": STATE_VERSION,
        "window": state.window,
        "compaction_id": state.compaction_id,
        "compacted_at": state.compacted_at,
        "compactions": [c.to_json() for c in state.compactions],
        "summaries": list(state.summaries),
        "overflows": state.overflows,
        "learned": dataclasses.asdict(state.learned),
        "max_request_tokens": state.max_request_tokens,
        "turn": state.turn,
        "turn_compactions": state.turn_compactions,
        "floor_checked": state.floor_checked,
        "whole_prompts": state.whole_prompts,
        "passed_over": None if state.passed_over is None else dataclasses.asdict(state.passed_over),
        "owed": state.owed,
        "prefix": None
        if prefix is None
        else {
            "length": prefix.length,
            "digest": prefix.digest,
            "view": view_records(prefix) if view is None else view,
        },
    }
    if state.archived:  # a state restored from version 1 and not observed since
        obj["archived"] = sorted(state.archived)
    if state.archived_prefix is not None:
        obj["archived_prefix"] = {
            "length": state.archived_prefix.length,
            "digest": state.archived_prefix.digest,
        }
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if len(text) > MAX_STATE_CHARS:
        raise InputError(
            f"session state is {len(text):,} characters, over the {MAX_STATE_CHARS:,} a store "
            "keeps; its compacted view holds messages too large to save"
        )
    return text


def view_records(prefix: CompactedPrefix) -> list[Any]:
    """The records the JSON form stores ``prefix``'s view as."""
    return [message_to_record(without_adapter_meta(m)) for m in prefix.view]


def state_from_json(text: str | bytes, path: str = "state") -> SessionState:
    """The `SessionState` that ``text`` (from `state_to_json`) holds. Anything else (not JSON,
    too long or deep, an unknown version or field, a wrong type, a negative or huge number) is
    one `InputError` line naming the field at ``path``."""
    if len(text) > MAX_STATE_CHARS:
        fail(path, f"{len(text):,} characters, over the {MAX_STATE_CHARS:,} a state may have")
    try:
        value = load_json(text)
    except (ValueError, RecursionError) as exc:
        fail(path, f"not JSON ({_first_line(exc)})")
    obj = as_object(value, path)
    version = required(obj, "version", path)
    if type(version) is not int or version not in READ_VERSIONS:
        fail(
            join(path, "version"),
            f"unknown state version {shown(version)}; this ctxbudget reads versions "
            f"{READ_VERSIONS[0]} to {READ_VERSIONS[-1]} (a state from a newer ctxbudget needs "
            "that version)",
        )
    known = _FIELDS if version == 2 else _FIELDS - {"archived_prefix"}
    unknown = sorted(set(obj) - known)
    if unknown:
        fail(path, f"unknown field {shown(unknown[0])} in a version-{version} state")
    try:
        window = validate_window(required(obj, "window", path), join(path, "window"))
    except ConfigError as exc:  # the window's own checks, as an input error
        raise InputError(str(exc)) from None
    return SessionState(
        window=window,
        compaction_id=_optional(obj, "compaction_id", path, as_str),
        compacted_at=_optional(obj, "compacted_at", path, _time),
        compactions=tuple(
            _compaction(c, join(join(path, "compactions"), i))
            for i, c in enumerate(_list(obj, "compactions", path))
        ),
        summaries=tuple(
            as_str(s, join(join(path, "summaries"), i))
            for i, s in enumerate(_list(obj, "summaries", path))
        ),
        overflows=_count(obj, "overflows", path),
        learned=_learned(obj.get("learned", {}), join(path, "learned")),
        max_request_tokens=_count(obj, "max_request_tokens", path),
        turn=_count(obj, "turn", path),
        turn_compactions=_count(obj, "turn_compactions", path),
        floor_checked=_bool(obj, "floor_checked", path),
        whole_prompts=_bool(obj, "whole_prompts", path),
        passed_over=_optional(obj, "passed_over", path, _gap),
        owed=_optional(obj, "owed", path, _trigger),  # checked: a trigger
        prefix=_optional(obj, "prefix", path, _prefix),
        archived=frozenset(
            _sha1(d, join(join(path, "archived"), i))
            for i, d in enumerate(_list(obj, "archived", path))
        ),
        archived_prefix=_optional(obj, "archived_prefix", path, _archived_prefix),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _list(obj: Mapping[str, Any], key: str, path: str) -> list[Any]:
    return list(as_list(obj.get(key, []), join(path, key)))


def _optional(obj: Mapping[str, Any], key: str, path: str, read: Any) -> Any:
    value = obj.get(key)
    return None if value is None else read(value, join(path, key))


def _int(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, f"expected a non-negative integer, got {type_name(value)}")
    if not 0 <= value <= MAX_COUNT:
        shown = f"an integer of {value.bit_length():,} bits" if value > 0 else str(value)
        fail(path, f"expected a non-negative integer up to 2**63 - 1, got {shown}")
    return value


def _count(obj: Mapping[str, Any], key: str, path: str) -> int:
    return _int(obj.get(key, 0), join(path, key))


def _bool(obj: Mapping[str, Any], key: str, path: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        fail(join(path, key), f"expected true or false, got {type_name(value)}")
    return value


def _time(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        fail(path, f"expected a time in seconds, got {type_name(value)}")
    if not (math.isfinite(value) and 0 <= value <= MAX_COUNT):
        fail(path, f"expected a time in seconds, got {shown(value)}")
    return float(value)


def _trigger(value: object, path: str) -> str:
    return choice(value, path, _TRIGGERS, "trigger")


def _sha1(value: object, path: str) -> str:
    text = as_str(value, path)
    if len(text) != 40 or not set(text) <= _SHA1_HEX:
        fail(path, f"expected a 40-character hex digest, got {shown(text)}")
    return text


def _compaction(value: object, path: str) -> CompactionRecord:
    obj = as_object(value, path)
    ints = ("turn", "messages_before", "messages_after", "tokens_before", "tokens_after")
    return CompactionRecord(
        trigger=_trigger(required(obj, "trigger", path), join(path, "trigger")),  # type: ignore[arg-type]
        strategy=as_str(required(obj, "strategy", path), join(path, "strategy")),
        **{k: _int(required(obj, k, path), join(path, k)) for k in ints},
    )


def _learned(value: object, path: str) -> SessionEvidence:
    obj = as_object(value, path)
    last = obj.get("last_prompt")
    return SessionEvidence(
        largest_reply=_count(obj, "largest_reply", path),
        largest_growth=_count(obj, "largest_growth", path),
        last_prompt=None if last is None else _int(last, join(path, "last_prompt")),
    )


def _gap(value: object, path: str) -> PromptGap:
    obj = as_object(value, path)
    return PromptGap(
        reported=_int(required(obj, "reported", path), join(path, "reported")),
        counted=_int(required(obj, "counted", path), join(path, "counted")),
    )


def _archived_prefix(value: object, path: str) -> ArchivedPrefix:
    obj = as_object(value, path)
    return ArchivedPrefix(
        length=_int(required(obj, "length", path), join(path, "length")),
        digest=_sha1(required(obj, "digest", path), join(path, "digest")),
    )


def _prefix(value: object, path: str) -> CompactedPrefix:
    obj = as_object(value, path)
    view = as_list(required(obj, "view", path), join(path, "view"))
    return CompactedPrefix(
        length=_int(required(obj, "length", path), join(path, "length")),
        digest=_sha1(required(obj, "digest", path), join(path, "digest")),
        view=tuple(message_from_record(m, join(join(path, "view"), i)) for i, m in enumerate(view)),
    )


# -- what each store read or wrote last ----------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Remembered:
    text: str | bytes
    """The state's JSON text as the store holds it."""
    state: SessionState
    view: list[Any] | None
    """``state.prefix``'s view records (`view_records`), when made."""


class _StateMemo:
    """The last state each key was saved or loaded with, by its JSON text, least recently used
    dropped past ``max_chars`` of text: a load of unchanged text returns the state read before
    (states are frozen values), and a save whose compacted prefix is the one remembered reuses
    its view's records."""

    def __init__(self, max_chars: int = 64 * 2**20) -> None:
        self.max_chars = max_chars
        self._entries: OrderedDict[str, _Remembered] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def loaded(self, key: str, text: str | bytes) -> SessionState | None:
        """The state remembered for ``key`` when its text is ``text``, else None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None or found.text != text:
                return None
            self._entries.move_to_end(key)
            return found.state

    def read(self, key: str, text: str | bytes, where: str) -> SessionState:
        """The state ``text`` holds for ``key``: the one remembered when the text is unchanged,
        else parsed (a bad one is one `InputError` line naming ``where``) and remembered."""
        known = self.loaded(key, text)
        if known is not None:
            return known
        try:
            state = state_from_json(text, where)
        except InputError as exc:
            raise InputError(_first_line(exc)) from None
        self.remember(key, text, state)
        return state

    def view(self, key: str, state: SessionState) -> list[Any] | None:
        """The view records of ``state.prefix`` when they are remembered for ``key``."""
        with self._lock:
            found = self._entries.get(key)
        if found is None or found.state.prefix is not state.prefix:
            return None
        return found.view

    def remember(
        self, key: str, text: str | bytes, state: SessionState, view: list[Any] | None = None
    ) -> None:
        """Keep ``state`` as ``key``'s, read from or written as ``text``."""
        if len(text) > self.max_chars:
            self.forget(key)
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= len(old.text)
            self._entries[key] = _Remembered(text, state, view)
            self._chars += len(text)
            while self._chars > self.max_chars:
                _, dropped = self._entries.popitem(last=False)
                self._chars -= len(dropped.text)

    def forget(self, key: str) -> None:
        """Drop what is remembered for ``key``."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= len(old.text)


def _to_json(memo: _StateMemo, key: str, state: SessionState) -> tuple[str, list[Any] | None]:
    """``state`` as JSON text, the view's records reused from ``memo`` when its compacted
    prefix is the one remembered for ``key``; with the records used."""
    view = memo.view(key, state)
    if view is None and state.prefix is not None:
        view = view_records(state.prefix)
    return state_to_json(state, view=view), view


# -- the SQLite store ------------------------------------------------------------------------------


def default_state_path() -> Path:
    """The state store's default file: ``state.sqlite3`` in the user's cache folder."""
    return user_cache_dir() / "state.sqlite3"


class SqliteSessionStore:
    """A `SessionStore` in the SQLite file at ``path`` (created 0600 when missing). Safe to
    share between threads (one connection behind a lock) and between processes (SQLite's
    locking; a save waits up to `BUSY_TIMEOUT_MS` for another's). A file that is not a state
    store, or that others can read, is one `InputError` line naming it."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(default_state_path() if path is None else path)
        _create_private(self.path)
        self._lock = threading.Lock()
        self._memo = _StateMemo()
        try:
            self._db = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # transactions are begun and ended here, explicitly
                check_same_thread=False,  # the lock serialises the threads
            )
        except sqlite3.Error as exc:
            raise self._error(exc, opening=True) from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            # A commit reaches the OS at once (a killed process loses none) and the disk at the
            # next checkpoint: no fsync a request. After a power cut the file is whole and at
            # most a few saves behind the archive, which a restored session reads as archived
            # (it appends nothing twice, `tests/gateway/test_after_reply.py`).
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS session_state "
                "(key TEXT PRIMARY KEY, json TEXT NOT NULL, updated_at REAL NOT NULL)"
            )
            self._db.execute("SELECT key, json, updated_at FROM session_state LIMIT 0")
        except sqlite3.Error as exc:
            self._db.close()
            raise self._error(exc, opening=True) from None

    def load(self, key: str) -> SessionState | None:
        """The state saved under ``key``, or None."""
        with self._lock:
            try:
                row = self._db.execute(
                    "SELECT json FROM session_state WHERE key = ?", (key,)
                ).fetchone()
            except sqlite3.Error as exc:
                raise self._error(exc) from None
        if row is None:
            return None
        text = row[0]
        if not isinstance(text, str | bytes):
            raise InputError(f"{self.path}: the state of {key!r} is not text; save it again")
        return self._memo.read(key, text, f"{self.path}[{key!r}]")

    def save(self, key: str, state: SessionState) -> None:
        """Keep ``state`` under ``key``, replacing what was there, in one transaction."""
        text, view = _to_json(self._memo, key, state)
        self._memo.forget(key)  # remembered again once written
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.execute(
                        "INSERT OR REPLACE INTO session_state (key, json, updated_at) "
                        "VALUES (?, ?, ?)",
                        (key, text, time.time()),
                    )
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._error(exc) from None
        self._memo.remember(key, text, state, view)

    def keys(self) -> list[str]:
        """The keys saved, sorted."""
        with self._lock:
            try:
                rows = self._db.execute("SELECT key FROM session_state ORDER BY key").fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from None
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        """Close the connection (the file stays)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> SqliteSessionStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _error(self, exc: sqlite3.Error, *, opening: bool = False) -> InputError | ArchiveError:
        """One line naming the file: a file that is not a state store (found on opening, or
        corrupt later) is bad input; a lock held past the timeout, or a disk that refuses, is a
        store that cannot be written."""
        reason = _first_line(exc)
        operational = isinstance(exc, sqlite3.OperationalError)
        if operational and ("locked" in reason or "busy" in reason):
            return ArchiveError(
                f"{self.path}: the state store stayed locked by another process for "
                f"{BUSY_TIMEOUT_MS / 1000:g} s ({reason}); try again"
            )
        if isinstance(exc, sqlite3.DatabaseError) and (opening or not operational):
            return InputError(
                f"{self.path}: not a ctxbudget state store ({reason}); move it away or pass "
                "another --state path"
            )
        return ArchiveError(f"{self.path}: the state store failed ({reason})")


def _create_private(path: Path) -> None:
    """Create ``path`` 0600 (its folder 0700) when missing, before SQLite opens it (SQLite gives
    its ``-wal`` and ``-shm`` files the same mode); refuse a file others can read."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot create its folder ({exc.strerror})") from None
    fd = open_regular(path, os.O_RDWR | os.O_CREAT, mode=0o600, what="state store")
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    if mode & 0o077:
        raise InputError(
            f"{path}: the state store is open to other users (mode {mode:o}); run chmod 600 {path}"
        )


# -- the Redis store -------------------------------------------------------------------------------


class RedisSessionStore:
    """A `SessionStore` in Redis at ``url`` (``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]``,
    ``rediss://`` for TLS), shared by every process given the same URL. A state expires
    ``idle_ttl`` seconds after its last save or load; `lock` holds a conversation's compaction
    lock (lost ``lock_ttl`` seconds after its holder stops renewing it; waited for up to
    ``lock_wait``). Opening pings the server: one that is down or refuses is one
    `ArchiveError` line naming it. Needs the ``redis`` package (the ``redis`` extra)."""

    def __init__(
        self,
        url: str,
        *,
        idle_ttl: float = DEFAULT_IDLE_TTL_S,
        lock_ttl: float = DEFAULT_LOCK_TTL_S,
        lock_wait: float = DEFAULT_LOCK_WAIT_S,
        namespace: str = "ctxbudget",
    ) -> None:
        redis_package = _import_redis()
        address = _redis_address(url)
        self.url = address.shown
        self.idle_ttl = _seconds("idle_ttl", idle_ttl, url)
        self.lock_ttl = _seconds("lock_ttl", lock_ttl, url)
        self.lock_wait = _seconds("lock_wait", lock_wait, url, zero=True)
        self._prefix = f"{namespace}:"
        self._memo = _StateMemo()
        from redis.backoff import ExponentialBackoff
        from redis.retry import Retry

        self._client: redis.Redis = redis_package.Redis(
            host=address.host,
            port=address.port,
            db=address.db,
            username=address.username,
            password=address.password,
            ssl=address.tls,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            # One quick reconnect rides over a Redis restart; more would only delay the error.
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 1),
        )
        with self._errors("cannot reach Redis", hint="; start it or pass another --state"):
            self._client.ping()

    def load(self, key: str) -> SessionState | None:
        """The state saved under ``key``, or None; its idle time starts again."""
        name = self._state_key(key)
        with self._errors("cannot load a state"):
            pipe = self._client.pipeline(transaction=True)
            pipe.get(name)
            pipe.pexpire(name, _ms(self.idle_ttl))
            text, _ = pipe.execute()
        if text is None:
            return None
        if not isinstance(text, bytes):  # pragma: no cover - the client returns bytes
            raise InputError(f"{self.url}[{key!r}]: the state is not text; save it again")
        return self._memo.read(key, text, f"{self.url}[{key!r}]")

    def save(self, key: str, state: SessionState) -> None:
        """Keep ``state`` under ``key`` (one ``SET``: a reader sees the old state or the new
        one), expiring after the idle time."""
        text, view = _to_json(self._memo, key, state)
        data = text.encode("ascii")
        self._memo.forget(key)  # remembered again once written
        with self._errors("cannot save a state"):
            self._client.set(self._state_key(key), data, px=_ms(self.idle_ttl))
        self._memo.remember(key, data, state, view)

    def keys(self) -> list[str]:
        """The keys saved (and not expired), sorted."""
        pattern = _glob_escape(self._prefix + "state:") + "*"
        with self._errors("cannot list the states"):
            names = list(self._client.scan_iter(match=pattern, count=1000))
        start = len(self._prefix + "state:")
        return sorted(bytes(n).decode("utf-8", "replace")[start:] for n in names)

    @contextmanager
    def lock(self, key: str) -> Iterator[bool]:
        """Hold the compaction lock of conversation ``key`` (across every process on this
        Redis): yields True once had, False when ``lock_wait`` ran out first. While held, a
        thread renews it every third of ``lock_ttl``, so only a holder that died or lost Redis
        loses it."""
        from redis.exceptions import RedisError

        lock = self._client.lock(
            self._prefix + "lock:" + key,
            timeout=self.lock_ttl,
            sleep=min(0.05, self.lock_ttl / 10),
            thread_local=False,  # the renewing thread uses the token too
            raise_on_release_error=False,  # a lock that expired meanwhile: nothing to free
        )
        with self._errors("cannot take a compaction lock"):
            held = lock.acquire(blocking=True, blocking_timeout=self.lock_wait)
        if not held:
            yield False
            return
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.lock_ttl / 3):
                try:
                    lock.reacquire()
                except RedisError:  # LockError too
                    return  # lost (expired, or Redis unreachable): it frees itself

        renewer = threading.Thread(target=renew, name="ctxbudget-lock-renew", daemon=True)
        renewer.start()
        try:
            yield True
        finally:
            stop.set()
            renewer.join()
            # Expired already, or Redis gone: its time to live frees it; the work is done.
            with suppress(RedisError):
                lock.release()

    def close(self) -> None:
        """Close the connections (the states stay in Redis)."""
        self._client.close()

    def __enter__(self) -> RedisSessionStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _state_key(self, key: str) -> str:
        return self._prefix + "state:" + key

    @contextmanager
    def _errors(self, doing: str, hint: str = "") -> Iterator[None]:
        """A Redis failure as one `ArchiveError` line naming the server (never its password)."""
        from redis.exceptions import RedisError

        try:
            yield
        except RedisError as exc:
            raise ArchiveError(f"{self.url}: {doing} ({_first_line(exc)}){hint}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class _RedisAddress:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    tls: bool
    shown: str
    """The URL without its password or options, for messages."""


def _redis_address(url: str) -> _RedisAddress:
    """The parts of a ``redis://`` or ``rediss://`` URL (options refused here: `open_store`
    takes them out); a malformed one is one `ConfigError` line."""
    parts = urlsplit(url)
    usage = "expected redis://HOST:PORT/DB"
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigError(f"--state {_redacted(url)}: not a redis:// URL; {usage}")
    if parts.query or parts.fragment:
        raise ConfigError(
            f"--state {_redacted(url)}: options go to open_store (idle_ttl, lock_ttl, lock_wait)"
        )
    try:
        port = parts.port or 6379
    except ValueError:
        raise ConfigError(
            f"--state {_redacted(url)}: the port must be a number from 1 to 65535; {usage}"
        ) from None
    host = parts.hostname
    if not host:
        raise ConfigError(f"--state {_redacted(url)}: no host; {usage}")
    path = parts.path.strip("/")
    if path and not re.fullmatch(r"[0-9]{1,5}", path):
        raise ConfigError(
            f"--state {_redacted(url)}: the database must be a number such as 0, got "
            f"{shown(path[:40])}; {usage}"
        )
    db = int(path) if path else 0
    shown_host = f"[{host}]" if ":" in host else host
    return _RedisAddress(
        host=host,
        port=port,
        db=db,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=parts.scheme == "rediss",
        shown=f"{parts.scheme}://{shown_host}:{port}/{db}",
    )


def _redacted(url: str) -> str:
    """``url`` with any password replaced by ``***`` (and cut to 200 characters)."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)[:200]


def _seconds(name: str, value: object, url: str, *, zero: bool = False) -> float:
    """A duration option as seconds; zero (where not allowed), negative, infinite or not a
    number is one `ConfigError` line."""
    least = "0 or more" if zero else "more than 0"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"--state {_redacted(url)}: {name} must be seconds ({least})")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise ConfigError(
            f"--state {_redacted(url)}: {name} must be seconds ({least}), got {shown(value)}"
        )
    if seconds > 365 * 86_400:
        raise ConfigError(f"--state {_redacted(url)}: {name} must be at most a year in seconds")
    return seconds


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _import_redis() -> Any:
    return require("redis", "redis", "a redis:// state store")


# -- a store from a --state value ----------------------------------------------------------------


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def open_store(spec: str) -> SessionStore:
    """The store a ``--state`` value names: a ``redis://`` or ``rediss://`` URL (options
    ``?idle_ttl=SECONDS&lock_ttl=SECONDS&lock_wait=SECONDS``) is a `RedisSessionStore`; any
    other value is the path of a `SqliteSessionStore` file. A URL of another scheme, an empty
    value or a bad option is one `ConfigError` line."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            "--state: empty; pass a file path (SQLite) or redis://HOST:PORT/DB (shared)"
        )
    if _URL.match(spec) is None:
        return SqliteSessionStore(spec)
    parts = urlsplit(spec)
    if parts.scheme.lower() not in ("redis", "rediss"):
        raise ConfigError(
            f"--state {_redacted(spec)}: unknown scheme {parts.scheme!r}; pass a file path "
            "(SQLite) or redis://HOST:PORT/DB (shared)"
        )
    options: dict[str, float] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in _REDIS_OPTIONS:
            raise ConfigError(
                f"--state {_redacted(spec)}: unknown option {shown(name[:40])}; known: "
                + ", ".join(_REDIS_OPTIONS)
            )
        try:
            options[name] = float(value)
        except ValueError:
            raise ConfigError(
                f"--state {_redacted(spec)}: {name} must be seconds, got {shown(value[:40])}"
            ) from None
    url = spec.partition("#")[0].partition("?")[0]  # as written, for its messages
    return RedisSessionStore(
        url,
        idle_ttl=options.get("idle_ttl", DEFAULT_IDLE_TTL_S),
        lock_ttl=options.get("lock_ttl", DEFAULT_LOCK_TTL_S),
        lock_wait=options.get("lock_wait", DEFAULT_LOCK_WAIT_S),
    )
