"""One budget session: the decisions and the send → overflow → recover → retry-once loop that
`Agent`, the four framework adapters and (later) the HTTP gateway share.

A `BudgetSession` keeps one conversation inside its window. It owns the counter, the rule, the
window (adopting a smaller one a server states or shows, never a larger one), the learned reply
reserve, the per-turn compaction cap, the silent-overflow checks, the usage trust and the
archive. Its callers only translate messages and do their own I/O: `run` / `arun` take the send
as a callable.

Where `ContextGuard` (the adapters) and `Agent` decided differently before this module (each
difference is now decided here, as `Agent` decides, unless said):

1. The rule: the guard asked ``policy.fires(tokens, window)``; `Agent` asks
   ``policy.fires_in_session(tokens, window, largest_reply=..., largest_growth=...)``, the
   ``ctxbudget`` rule keeping the largest reply and step seen free (the learned reserve,
   `SessionEvidence`). The guard learned neither.
2. The cap: `Agent` stops pressure compactions after ``max_compactions_per_turn`` in one turn
   (a ``capped`` event); the guard had no cap, so a conversation whose floor sat near the line
   could compact on every call. Adapters cannot see turns: each of their model calls is one
   (``new_turn=True``), so the cap bounds the compactions of one call. (A turn from the user's
   message on would cap a 40-step tool loop at 3 compactions and let it overflow over and over,
   which the adapters' long-loop tests rule out; `Agent` stops such a turn at 32 steps.)
3. Silent overflows: `Agent` drops a reply cut by a smaller window (``cut_reply``) and resends,
   and adopts the window behind a truncated prompt (``truncated_prompt``, ``served_overflow``,
   ``half_window``); the guard checked neither. Here both run when the caller hands `run` a
   ``reply`` reader (usage and stop reason of a result); the adapters do not hand one yet
   (their results may be streams whose usage comes after `run` returns).
4. The second overflow: `Agent` counts it (``overflows`` 2) before its `CompactionError`; the
   guard did not (``retry_failed``). `run` counts it; `fail` (for frameworks that drive the
   retry themselves, the Agents SDK) takes ``count`` so that adapter keeps its number.
5. Usage after a compaction: the guard also required a usage's timestamp to postdate the
   compaction (``compacted_at``); `Agent` only matched the compaction id. Kept (the stricter).
6. The floor message: `Agent` names its provider and base URL; the guard named neither.
   ``provider_name`` / ``base_url`` here.
7. The summarizer: the guard's was an attribute every adapter reassigned before each call (a
   race between concurrent calls); here it is fixed at construction or passed per call.
8. State: `Agent` restores from its archive's meta; the guard kept everything in memory only.
   Here `snapshot` / `apply` and `save` / `restore` through a `SessionStore` (its JSON form and
   the SQLite store: `ctxbudget.agent.session_store`); the state keeps the latest compaction's
   prefix (by `prefix_digest`) and view, so a restored session reuses it.
9. Shared state (the gateway's instances): a session given a ``store`` and ``key`` compacts
   under the store's lock for the conversation (`compaction_lock`) and re-loads the state once
   it holds it, so a compaction another instance saved meanwhile is reused, not made again; the
   compaction it makes is saved before the lock is released.

Who drives what. The OpenAI SDK client (sync and async) and the LangChain middleware (sync and
async) hand their send to `run` / `arun`. pydantic-ai and the Agents SDK own their send and their
retry, so they call the steps (`prepare`, `recover`, `fail`) from their hooks. `Agent` calls the
steps too: its send rebuilds its request after a window change, and its truncation compaction
covers the reply it has just recorded; `tests/agent/test_budget_session.py` checks that `run`
decides exactly as `Agent` on scripted conversations.

Concurrency. Two thread locks: ``_compacting`` is held for a whole decision and compaction
(the summary call included), so two concurrent calls never summarise the same prefix twice: the
second waits, then finds the prefix already replaced (`_substitute`) and under the line. ``_state``
is held only around pure updates of the numbers (usage, overflows, window), never across I/O.
Thread locks, not ``asyncio.Lock``: the compaction runs in a worker thread (``asyncio.to_thread``,
so counting and summarising never block the event loop) and one session may serve sync and async
callers at once; an ``asyncio.Lock`` cannot be held by a worker thread. The event loop itself
never waits on ``_compacting``.

Across sessions. A session with a ``store`` also holds the store's lock for its conversation
across a compaction: a lock between processes (`RedisSessionStore` in
``ctxbudget.agent.session_store``), or for any other store a lock between the sessions of this
process (`process_lock`). Holding it, the session loads the stored state: when another session
saved a compaction meanwhile, that state is taken over (it is the conversation's newest) and its
view used; only when the request is still over the line is it compacted, then saved. A lock not
had within the store's wait (a holder alive but slow) means going on without compacting: never
summarising twice is kept over compacting now (an overflow that follows is recovered as usual).
`save` to that store leaves a state with more compactions than the session knows in place (a
request that ran alongside another instance's compaction must not put the older state back).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ctxbudget.agent.compacting import (
    adopt_window,
    compact_under_line,
    still_over_window,
    undercount_scale,
)
from ctxbudget.agent.events import CompactionRecord, Trigger
from ctxbudget.agent.settings import effective_max_output, policy_for, reply_reserve
from ctxbudget.agent.silent import (
    SilentOverflow,
    cut_reply,
    half_window,
    served_overflow,
    truncated_prompt,
)
from ctxbudget.budget.context import ContextEstimate, RequestCounterLike, UsageTrust, context_tokens
from ctxbudget.budget.floor import check_prompt_floor, one_line
from ctxbudget.budget.rules import Checkpoint, Policy, SessionEvidence, validate_window
from ctxbudget.budget.usage import PromptGap, prompt_gap
from ctxbudget.errors import CompactionError, ConfigError, ContextOverflowError
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.usage import Usage

if TYPE_CHECKING:
    from ctxbudget.compaction.archive import Archive
    from ctxbudget.compaction.summarizer import Summarizer
    from ctxbudget.counting.result import RequestCount
    from ctxbudget.tokens.base import TokenCounter

__all__ = [
    "ADAPTER_META_PREFIX",
    "DEFAULT_LOCK_WAIT_S",
    "DEFAULT_MAX_COMPACTIONS_PER_TURN",
    "ArchivedPrefix",
    "BudgetSession",
    "CompactedPrefix",
    "LockingSessionStore",
    "MemorySessionStore",
    "Reply",
    "SessionState",
    "SessionStore",
    "compaction_lock",
    "default_counter",
    "prefix_digest",
    "process_lock",
]

Result = TypeVar("Result")

# 3: enough for one compaction before a request, one after a long tool step and one on
# overflow; a cap at all makes a compaction loop impossible (Codex users reported 111
# compactions in one turn).
DEFAULT_MAX_COMPACTIONS_PER_TURN = 3

ADAPTER_META_PREFIX = "ctxbudget_"
"""``Message.meta`` keys the adapters use to map messages back to their items; not archived."""

DEFAULT_LOCK_WAIT_S = 120.0
"""How long a session waits for another's compaction of its conversation before it goes on
without compacting: a summary by a local model of a long prompt can take a minute."""

EventSink = Callable[[str, dict[str, Any]], None]
"""Receives ``overflow``, ``window_changed``, ``compaction``, ``capped`` and ``lock_waited``
(the store's compaction lock was not had in time) with their data."""


def default_counter(tokenizer: str | TokenCounter) -> RequestCounterLike:
    """The whole-request counter for ``tokenizer`` (a counter name or a `TokenCounter`), as
    `Agent` and the adapters build one when they are given none."""
    from ctxbudget.counting import RequestCounter  # imported late: loads a vocabulary

    counter: RequestCounterLike = RequestCounter(tokenizer)
    return counter


@dataclass(frozen=True, slots=True)
class Reply:
    """What the silent-overflow checks read from a result: its usage and why it stopped."""

    usage: Usage
    stop_reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactedPrefix:
    """The prefix the latest compaction replaced, by its `prefix_digest`, and the view that
    stands in for it: a later request that starts with the prefix is sent with the view instead
    (not summarised again, also after a restart)."""

    length: int
    """How many messages the prefix has."""
    digest: str
    view: tuple[Message, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivedPrefix:
    """The list `BudgetSession.observe` last went through, every message of it archived (or a
    summary, which its compaction record holds): its length and `prefix_digest`. A restored
    session skips the messages of a request that starts with it, and the state saved each
    request holds two values here, not one digest per message of the history."""

    length: int
    digest: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionState:
    """A session's numbers, everything a restored session needs to decide as it would have."""

    window: int
    compaction_id: str | None = None
    compacted_at: float | None = None
    compactions: tuple[CompactionRecord, ...] = ()
    summaries: tuple[str, ...] = ()
    overflows: int = 0
    learned: SessionEvidence = dataclasses.field(default_factory=SessionEvidence)
    """The largest reply and step so far (the learned reserve)."""
    max_request_tokens: int = 0
    turn: int = 0
    turn_compactions: int = 0
    floor_checked: bool = False
    whole_prompts: bool = False
    """`UsageTrust.whole_prompts`: a server report agreed with our exact count."""
    passed_over: PromptGap | None = None
    """`UsageTrust.passed_over`: the report already said to be passed over."""
    owed: Trigger | None = None
    """A compaction a silent truncation made due, not made yet."""
    prefix: CompactedPrefix | None = None
    """The latest compaction's prefix and view (a restored session reuses the view)."""
    archived: frozenset[str] = frozenset()
    """The digests of messages already archived (a restored session does not append them
    again). Saved by older versions; a session now saves `archived_prefix` instead."""
    archived_prefix: ArchivedPrefix | None = None
    """The last list observed, all of it archived (a restored session does not append it
    again)."""


class SessionStore(Protocol):
    """Where sessions' states live between requests: `MemorySessionStore`, `SqliteSessionStore`
    and the shared `RedisSessionStore` (``ctxbudget.agent.session_store``)."""

    def load(self, key: str) -> SessionState | None:
        """The state saved under ``key``, or None."""
        ...

    def save(self, key: str, state: SessionState) -> None:
        """Keep ``state`` under ``key``, replacing what was there."""
        ...


@runtime_checkable
class LockingSessionStore(SessionStore, Protocol):
    """A `SessionStore` shared by processes, with its own lock for a conversation's compaction
    (`RedisSessionStore`). A store without one gets `process_lock` (`compaction_lock`)."""

    def lock(self, key: str) -> AbstractContextManager[bool]:
        """Held while the conversation ``key`` is compacted; yields True when had, False when
        the store's wait ran out first (the holder is still at work)."""
        ...


class _ProcessLocks:
    """One thread lock per name while anyone holds or waits for it (then dropped, so the table
    stays as small as the compactions in progress)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, list[int]]] = {}

    @contextmanager
    def hold(self, name: str, wait: float) -> Iterator[bool]:
        with self._guard:
            lock, users = self._locks.setdefault(name, (threading.Lock(), [0]))
            users[0] += 1
        try:
            held = lock.acquire(timeout=wait)
            try:
                yield held
            finally:
                if held:
                    lock.release()
        finally:
            with self._guard:
                users[0] -= 1
                if users[0] == 0:
                    del self._locks[name]


_PROCESS_LOCKS = _ProcessLocks()


def process_lock(key: str, wait: float = DEFAULT_LOCK_WAIT_S) -> AbstractContextManager[bool]:
    """The compaction lock of the conversation ``key`` between the sessions of this process
    (whatever their store): yields True when had within ``wait`` seconds, else False."""
    return _PROCESS_LOCKS.hold(key, wait)


def compaction_lock(store: SessionStore, key: str) -> AbstractContextManager[bool]:
    """The lock a session holds while it compacts the conversation ``key`` kept in ``store``:
    the store's own (`LockingSessionStore`), else `process_lock`."""
    if isinstance(store, LockingSessionStore):
        return store.lock(key)
    return process_lock(key)


class MemorySessionStore:
    """A `SessionStore` in a dict (states are frozen, so they are shared, not copied)."""

    def __init__(self) -> None:
        self._states: dict[str, SessionState] = {}
        self._lock = threading.Lock()

    def load(self, key: str) -> SessionState | None:
        """The state saved under ``key``, or None."""
        with self._lock:
            return self._states.get(key)

    def save(self, key: str, state: SessionState) -> None:
        """Keep ``state`` under ``key``."""
        with self._lock:
            self._states[key] = state


class BudgetSession:
    """Keeps one conversation inside ``window``: decides, compacts, recovers, records.

    ``counter`` counts whole requests; ``policy`` is a rule name or `Policy`; ``summarizer`` the
    default one (a call may pass its own). ``served_window`` asks the server its window (Ollama's
    ``/api/ps``) when a truncation shows one. ``on_event`` hears what `Agent` emits. With
    ``store`` and ``key`` (the conversation's key there), each compaction is made once across
    every session sharing the store (see "Across sessions" above) and saved to it.
    """

    def __init__(
        self,
        *,
        window: int,
        counter: RequestCounterLike,
        policy: str | Policy = "ctxbudget",
        strategy: str = "layered",
        summarizer: Summarizer | None = None,
        archive: Archive | None = None,
        max_output_tokens: int | None = None,
        max_compactions_per_turn: int = DEFAULT_MAX_COMPACTIONS_PER_TURN,
        on_event: EventSink | None = None,
        served_window: Callable[[], int | None] | None = None,
        provider_name: str | None = None,
        base_url: str | None = None,
        store: SessionStore | None = None,
        key: str | None = None,
    ) -> None:
        if (store is None) != (key is None):
            raise ConfigError("BudgetSession: pass store and key together (or neither)")
        self.window = validate_window(window)
        self.configured_window = self.window
        self.policy_spec = policy
        self.max_output_setting = max_output_tokens
        self.policy = policy_for(policy, self.window, self.max_output_tokens)
        self.strategy = strategy
        self.counter = counter
        self.summarizer = summarizer
        self.archive = archive
        self.max_compactions_per_turn = max_compactions_per_turn
        self.on_event = on_event
        self.served_window = served_window
        self.provider_name = provider_name
        self.base_url = base_url
        self.store = store
        """Where the conversation ``key``'s state is shared: compactions are made under its lock
        and saved there (the caller still restores before and saves after each request)."""
        self.key = key
        self.compaction_id: str | None = None
        self.compacted_at: float | None = None
        """When the latest compaction ran: usage reported before it describes another context."""
        self.compactions: list[CompactionRecord] = []
        self.summaries: list[str] = []
        """Every handoff summary written so far, oldest first."""
        self.overflows = 0
        self.learned = SessionEvidence()
        """The largest reply and step so far: the ``ctxbudget`` rule keeps that much free."""
        self.max_request_tokens = 0
        self.floor_tokens = 0
        self.turn = 0
        self.turn_compactions = 0
        self.sources: Counter[str] = Counter()
        """How the checks reached their sizes: ``usage`` (usage-first) or ``count``."""
        self.usage_trust = UsageTrust()
        self.floor_checked = False
        self._archived: set[str] = set()
        self._prefix: CompactedPrefix | None = None
        self._replaced: tuple[Message, ...] = ()
        """The messages `_prefix` stands for, when this process has seen them: compared as they
        are, before any digest is taken."""
        self._owed: Trigger | None = None
        self._served_asked = False
        """`served_window` was asked about a gap the usage trust passed over (once a session)."""
        """A compaction a silent truncation showed is needed, made by the next `prepare`."""
        self._observed: tuple[Message, ...] = ()
        """The list `observe` last went through: a list that starts with it (an agent resending
        its whole conversation) is digested from where it differs only."""
        self._observed_digests: list[str] = []
        """The `_digest` of each message of `_observed`, in order (its `prefix_digest` is saved
        as `SessionState.archived_prefix`)."""
        self._resumed_prefix: ArchivedPrefix | None = None
        """From a restored state: the list observed last, all archived; the next `observe`
        skips a list's messages that start with it."""
        self._compacting = threading.RLock()
        self._state = threading.RLock()

    @property
    def max_output_tokens(self) -> int:
        """The reply limit a request should ask for: as configured, else a share of the window."""
        return effective_max_output(self.window, self.max_output_setting)

    @property
    def largest_reply(self) -> int:
        """The largest reply so far (``learned.largest_reply``)."""
        return self.learned.largest_reply

    # -- the loop ------------------------------------------------------------------------------

    def run(
        self,
        request: Request,
        send: Callable[[Request], Result],
        *,
        summarizer: Summarizer | None = None,
        reply: Callable[[Result], Reply | None] | None = None,
        new_turn: bool = False,
        checkpoints: Sequence[Checkpoint] = ("before_request", "after_step"),
        retry_truncated: bool = False,
    ) -> Result:
        """Send ``request`` inside the window: prepare (floor, rule, compact), ``send``; on an
        overflow adopt the stated window, compact harder and send once more; a second overflow is
        `CompactionError`. ``send`` raises `ContextOverflowError` for an overflow (adapters map
        their framework's errors with ``overflow_of``). With ``reply``, a reply cut by a smaller
        window is dropped and resent, and a truncated prompt's window adopted (the next `prepare`
        compacts; with ``retry_truncated`` its reply is dropped instead, and the request compacted
        and sent once more now, as for a cut reply: the gateway's, whose client must get a reply
        to a whole prompt). ``new_turn`` starts a turn: the per-turn compaction cap starts again;
        ``checkpoints`` are those the rule is asked at before this request."""
        sent = self.prepare(
            request, summarizer=summarizer, new_turn=new_turn, checkpoints=checkpoints
        )
        try:
            result = send(sent)
        except ContextOverflowError as error:
            sent = self.recover(sent, error, summarizer=summarizer)
            return self._resend(sent, send, reply)
        found = self._read(result, reply)
        if found is not None and (
            self.cut(sent, found) is not None
            or self._truncated(sent, found.usage, retry=retry_truncated)
        ):
            sent = self.compact(sent, "context_overflow", summarizer=summarizer)
            return self._resend(sent, send, reply)
        return result

    async def arun(
        self,
        request: Request,
        send: Callable[[Request], Awaitable[Result]],
        *,
        summarizer: Summarizer | None = None,
        reply: Callable[[Result], Reply | None] | None = None,
        new_turn: bool = False,
        checkpoints: Sequence[Checkpoint] = ("before_request", "after_step"),
        retry_truncated: bool = False,
    ) -> Result:
        """`run` for async I/O: the decisions and compactions run in a worker thread (a
        summarizer that needs the event loop bridges to it itself), the sends on the loop."""
        sent = await asyncio.to_thread(
            self.prepare,
            request,
            summarizer=summarizer,
            new_turn=new_turn,
            checkpoints=checkpoints,
        )
        return await self.asend(
            sent, send, summarizer=summarizer, reply=reply, retry_truncated=retry_truncated
        )

    async def asend(
        self,
        sent: Request,
        send: Callable[[Request], Awaitable[Result]],
        *,
        summarizer: Summarizer | None = None,
        reply: Callable[[Result], Reply | None] | None = None,
        retry_truncated: bool = False,
        counted: RequestCount | None = None,
    ) -> Result:
        """`arun` after its `prepare`: for a caller that runs ``prepare`` in a worker thread of
        its own, together with other blocking work of the same request (the gateway: one
        thread hop, not three). ``sent`` is what `prepare` returned; the rest is `arun`'s.
        ``counted``: this session's counter's count of ``sent``, when the caller made it (a
        reply whose report matches it is then checked for truncation on the loop)."""
        try:
            result = await send(sent)
        except ContextOverflowError as error:
            sent = await asyncio.to_thread(self.recover, sent, error, summarizer=summarizer)
            return await self._aresend(sent, send, reply)
        found = self._read(result, reply)
        if found is not None and (
            self.cut(sent, found) is not None
            or await self._atruncated(sent, found.usage, retry_truncated, counted)
        ):
            sent = await asyncio.to_thread(
                self.compact, sent, "context_overflow", summarizer=summarizer
            )
            return await self._aresend(sent, send, reply)
        return result

    def _resend(
        self,
        sent: Request,
        send: Callable[[Request], Result],
        reply: Callable[[Result], Reply | None] | None,
    ) -> Result:
        try:
            result = send(sent)
        except ContextOverflowError as again:
            raise self.fail(again) from again
        found = self._read(result, reply)
        if found is not None:
            self._truncated(sent, found.usage)
        return result

    async def _aresend(
        self,
        sent: Request,
        send: Callable[[Request], Awaitable[Result]],
        reply: Callable[[Result], Reply | None] | None,
    ) -> Result:
        try:
            result = await send(sent)
        except ContextOverflowError as again:
            raise self.fail(again) from again
        found = self._read(result, reply)
        if found is not None:
            await asyncio.to_thread(self._truncated, sent, found.usage)
        return result

    async def _atruncated(
        self, sent: Request, usage: Usage, retry: bool, counted: RequestCount | None
    ) -> bool:
        """`_truncated`, in a worker thread unless nothing in it can block: ``sent``'s count is
        known (``counted``) and the report is no gap below it (`prompt_gap`), so
        `check_truncation` finds nothing and asks the server nothing (its `served_window`, its
        other counts and the archive's meta all follow a gap). That check, the step's usual
        one, then runs here: a worker-thread hop costs more than it does."""
        if counted is not None and prompt_gap(usage.input_tokens, counted.total) is None:
            return self._truncated(sent, usage, retry=retry, counted=counted)
        return await asyncio.to_thread(self._truncated, sent, usage, retry=retry, counted=counted)

    def _truncated(
        self,
        sent: Request,
        usage: Usage,
        *,
        retry: bool = False,
        counted: RequestCount | None = None,
    ) -> bool:
        """True when `check_truncation` found one and the caller is to compact ``sent`` and
        resend it now (``retry``); without ``retry`` the next `prepare` compacts whatever the
        rule says (the caller's view holds the reply by then, as `Agent`'s does when it
        compacts)."""
        if self.check_truncation(sent, usage, counted) is None:
            return False
        if not retry:
            with self._state:
                self._owed = "context_overflow"
        return retry

    @staticmethod
    def _read(result: Result, reply: Callable[[Result], Reply | None] | None) -> Reply | None:
        return None if reply is None else reply(result)

    # -- the steps (for frameworks that own the send and the retry) ----------------------------

    def prepare(
        self,
        request: Request,
        *,
        summarizer: Summarizer | None = None,
        new_turn: bool = False,
        checkpoints: Sequence[Checkpoint] = ("before_request", "after_step"),
    ) -> Request:
        """The request to send: ``request``, compacted when the rule fires (a prefix an earlier
        call already compacted is replaced by its view first). The first call checks the prompt
        floor (`PromptFloorExceeded`: nothing could fit)."""
        with self._compacting:
            if new_turn:
                self.begin_turn()
            if not self.floor_checked:
                self.check_floor(request)
            request = self._substitute(request)
            self.observe(request.messages)
            with self._state:
                owed, self._owed = self._owed, None
            if owed is not None:
                return self.compact(request, owed, summarizer=summarizer)
            if not self.should_compact(request, checkpoints):
                return request
            return self.compact(request, "context_pressure", summarizer=summarizer)

    def recover(
        self, request: Request, error: ContextOverflowError, *, summarizer: Summarizer | None = None
    ) -> Request:
        """After the server rejected ``request`` as too long: count it, adopt its stated window
        and compact harder (by how far our count fell short of the server's)."""
        with self._compacting:
            self.overflowed(error, request)
            scale = undercount_scale(self.counter.count(request).total, error.prompt_tokens)
            self.observe(request.messages)
            return self.compact(request, "context_overflow", scale=scale, summarizer=summarizer)

    def fail(self, error: BaseException, *, count: bool = True) -> CompactionError:
        """The error for a request that overflowed again after its compaction (counted as an
        overflow unless ``count`` is False)."""
        if count and isinstance(error, ContextOverflowError):
            self.overflowed(error)
        return CompactionError(still_over_window(error))

    def begin_turn(self, turn: int | None = None) -> None:
        """A new user turn (number ``turn``, else the next): the compaction cap starts again."""
        with self._state:
            self.turn = self.turn + 1 if turn is None else turn
            self.turn_compactions = 0

    # -- decisions -------------------------------------------------------------------------------

    def estimate(self, request: Request) -> ContextEstimate:
        """The request's size, usage-first (a report far below our exact count is passed over,
        and that is said once)."""
        estimate = context_tokens(
            request, self.counter, compaction_id=self.compaction_id, compacted_at=self.compacted_at
        )
        with self._state:
            self.usage_trust.note(estimate.passed_over)
            self.sources[estimate.source] += 1
        return estimate

    def should_compact(
        self, request: Request, checkpoints: Sequence[Checkpoint] = ("before_request",)
    ) -> bool:
        """True when the rule, checked at one of ``checkpoints``, fires for ``request`` with the
        learned reply reserve, and this turn's cap of pressure compactions is not reached."""
        if not any(c in self.policy.checked for c in checkpoints):
            return False
        tokens = self.estimate(request).tokens
        if not self._fires(tokens):
            return False
        if self.turn_compactions >= self.max_compactions_per_turn:
            self._emit("capped", tokens=tokens, cap=self.max_compactions_per_turn)
            return False
        return True

    def _fires(self, tokens: int) -> bool:
        """The rule fires for a request of ``tokens``, with the learned reply reserve."""
        seen = self.learned.seeing(tokens)  # the step that led here is already seen
        return self.policy.fires_in_session(
            tokens,
            self.window,
            largest_reply=seen.largest_reply,
            largest_growth=seen.largest_growth,
        )

    def check_floor(self, request: Request) -> None:
        """Raise `PromptFloorExceeded` when system + tools + reply reserve exceed the window."""
        count = self.counter.count(request)
        reserve = reply_reserve(self.policy, self.window, self.max_output_tokens)
        with self._state:
            self.floor_tokens = count.floor
        check_prompt_floor(
            count,
            self.window,
            reserve,
            provider_name=self.provider_name,
            base_url=self.base_url,
            request=request,
        )
        self.floor_checked = True

    def cut(self, sent: Request, reply: Reply) -> SilentOverflow | None:
        """A reply stopped by a window smaller than ours: counted as an overflow, its window
        adopted; the caller drops the reply, compacts and resends."""
        found = cut_reply(
            reply.usage,
            reply.stop_reason,
            asked=sent.max_output_tokens or self.max_output_tokens,
            window=self.window,
        )
        if found is not None:
            self.silent_overflow(found, reply.usage.input_tokens, "length")
        return found

    def check_truncation(
        self, sent: Request, usage: Usage, counted: RequestCount | None = None
    ) -> SilentOverflow | None:
        """A prompt the server silently shortened (from a server known to report whole prompts,
        or one whose stated window shows it, `_stated_truncation`): adopt the window it shows.
        The caller compacts (the reply stays: the server answered the newest messages, which
        truncation keeps). ``counted``: the counter's count of ``sent``, when made already."""
        count = self.counter.count(sent) if counted is None else counted
        with self._state:
            gap = self.usage_trust.truncation(usage, count)
        if gap is None:
            return self._stated_truncation(usage, count)
        found = truncated_prompt(usage, count.total)
        if found is None:
            return None
        found = self._truncation_window(sent, found, count.total)
        self.silent_overflow(found, usage.input_tokens, "truncated")
        return found

    def _stated_truncation(self, usage: Usage, count: RequestCount) -> SilentOverflow | None:
        """A gap the usage trust passed over, read as a truncation when the server states the
        window it serves (`served_window`, Ollama's ``/api/ps``) and that window lies between
        the prompt it reported and our exact count: the server says it holds no more than that.

        The trust needs an earlier report that matched, which a conversation never gives when
        its first request is already over the server's window (a harness's long history, or
        Claude Code's ~14K-token first request to an Ollama loaded with 4,096): each of its
        requests would be truncated and passed over. Asked once a session, on the first such
        gap: a server that states nothing (its reports are no whole counts) is not asked again.
        """
        if self.served_window is None or count.kind != "exact":
            return None
        if prompt_gap(usage.input_tokens, count.total) is None:
            return None
        with self._state:
            if self.usage_trust.whole_prompts or self._served_asked:
                return None
            self._served_asked = True
        found = served_overflow(usage.input_tokens, count.total, self.served_window())
        if found is not None:
            self.silent_overflow(found, usage.input_tokens, "truncated")
        return found

    def _truncation_window(
        self, sent: Request, found: SilentOverflow, counted: int
    ) -> SilentOverflow:
        """The server's own window when it can be asked, else the one behind Ollama's
        half-window cut, else the reported size (never more than the real window)."""
        reported = found.limit
        served_now = self.served_window() if self.served_window is not None else None
        served = served_overflow(reported, counted, served_now)
        if served is not None:
            return served
        kept = (
            self.counter.count(sent.with_messages(sent.messages[dropped:])).total
            for dropped in range(1, len(sent.messages))
        )
        half = half_window(reported, counted, kept)
        # Not smaller than the window in force: a guess already adopted and still truncated,
        # so the guess was too large (see half_window); the reported size is sure.
        return half if half is not None and half.limit < self.window else found

    # -- state changes ---------------------------------------------------------------------------

    def overflowed(self, error: ContextOverflowError, refused: Request | None = None) -> None:
        """Count a refused request and adopt the window its error states (when smaller). An
        error that states no limit still says the server holds less than ``refused`` (the
        request it refused) plus the reply room: that is adopted, so the retry is smaller."""
        self._count_overflow(
            limit=error.limit, prompt_tokens=error.prompt_tokens, message=one_line(str(error))
        )
        if error.limit is not None:
            self.adopt(error.limit, "the server stated its real context length")
        elif refused is not None:
            # Compacting toward the window we believed sent the same request again (Codex in
            # front of a server smaller than it says: refused twice, exit 1). Never below the
            # floor: the system prompt and tools are part of what was refused.
            self.adopt(
                self.counter.count(refused).total + self.max_output_tokens,
                "the server refused the request without stating its limit",
            )

    def silent_overflow(self, found: SilentOverflow, prompt_tokens: int, silent: str) -> None:
        """Count an overflow the server did not report as an error, and adopt its window."""
        self._count_overflow(
            limit=found.limit, prompt_tokens=prompt_tokens, message=found.reason, silent=silent
        )
        self.adopt(found.limit, found.reason)

    def _count_overflow(self, **data: Any) -> None:
        with self._state:
            self.overflows += 1
            overflows = self.overflows
        if self.archive is not None:
            self.archive.append_meta({"overflows": overflows})
        self._emit("overflow", **data)

    def adopt(self, limit: int, reason: str, *, request: Request | None = None) -> bool:
        """Adopt ``limit`` as the window when it is smaller (never larger: a larger stated limit
        says our count was low, not that the chosen window should grow)."""
        with self._state:
            adopted = adopt_window(
                limit, self.window, self.policy_spec, self.max_output_setting, self.archive
            )
            if adopted is None:
                return False
            old = self.window
            self.window, self.policy = adopted
        self._emit("window_changed", old=old, window=self.window, reason=reason)
        self.floor_checked = False  # the next request checks the floor in the new window
        if request is not None:
            self.check_floor(request)
        return True

    def compact(
        self,
        request: Request,
        trigger: Trigger,
        *,
        scale: float = 1.0,
        summarizer: Summarizer | None = None,
    ) -> Request:
        """``request`` compacted under the rule's line (lowered by ``scale`` < 1), recorded.
        With a ``store``: under its lock for the conversation, a compaction saved there meanwhile
        is reused instead (see "Across sessions"), and this one is saved before the lock goes."""
        with self._compacting:
            if self.store is None or self.key is None:
                return self._compact(request, trigger, scale=scale, summarizer=summarizer)
            with compaction_lock(self.store, self.key) as held:
                taken = self._take_stored(request)
                if taken is not request and not self._fires(self.estimate(taken).tokens):
                    return taken  # another session's compaction covers it
                if not held:
                    self._emit("lock_waited", key=self.key, trigger=trigger)
                    return taken
                compacted = self._compact(taken, trigger, scale=scale, summarizer=summarizer)
                self.save(self.store, self.key)
                return compacted

    def _take_stored(self, request: Request) -> Request:
        """Under the compaction lock: the stored state when it holds a compaction this session
        has not seen (another session's, saved since this one restored), taken over whole, and
        ``request`` with that compaction's view in place of its prefix (``request`` itself when
        there is none, or when its prefix is not this request's)."""
        assert self.store is not None and self.key is not None
        stored = self.store.load(self.key)
        if stored is None or stored.prefix is None or stored.compaction_id == self.compaction_id:
            return request
        self.apply(stored)
        return self._substitute(request)

    def _compact(
        self,
        request: Request,
        trigger: Trigger,
        *,
        scale: float,
        summarizer: Summarizer | None,
    ) -> Request:
        """`compact` in this session alone: compacted, recorded, archived, emitted."""
        with self._compacting:
            if not self.floor_checked:
                self.check_floor(request)  # after an adopted window
            result, record = compact_under_line(
                request,
                self.counter,
                policy=self.policy,
                window=self.window,
                max_output=self.max_output_tokens,
                strategy=self.strategy,
                summarizer=summarizer if summarizer is not None else self.summarizer,
                number=len(self.compactions) + 1,
                trigger=trigger,
                turn=self.turn,
                scale=scale,
            )
            compacted = request.with_messages(result.messages)
            # The prefix as the caller's own list has it: a client that resends its whole
            # history must find the second compaction's prefix too, not only the first's.
            replaced = self._unsubstituted(request.messages)
            prefix = CompactedPrefix(
                length=len(replaced), digest=prefix_digest(replaced), view=compacted.messages
            )
            with self._state:
                # The cap binds pressure compactions (`should_compact`); an overflow compaction
                # is bounded by the retry-once and is the only way forward.
                self.turn_compactions += 1
                self.compacted_at = time.time()
                self.compaction_id = result.compaction_id
                self.learned = self.learned.after_compaction()  # its drop is not a step
                if result.summary:
                    self.summaries.append(result.summary)
                self.compactions.append(record)
                number = len(self.compactions)
                self._prefix, self._replaced = prefix, replaced
            if self.archive is not None:
                view = tuple(without_adapter_meta(m) for m in result.messages)
                # The view's new messages (summary, placeholders) live in the compaction record.
                self._archived.update(_digest(m) for m in view)
                self.archive.append_compaction(
                    dataclasses.replace(result, messages=view),
                    trigger=trigger,
                    extra={"turn": self.turn},
                )
                # One key per compaction, so a resumed session still lists them all.
                self.archive.append_meta({f"compaction.{number}": record.to_json()})
            self._emit("compaction", **record.to_json())
            return compacted

    def _unsubstituted(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        """``messages`` as the caller's own list: when they start with the view of the prefix
        `_substitute` replaced (a harness resending its whole list), that prefix in its place.
        Otherwise ``messages`` (a caller that keeps the view, as `Agent` does). A compaction of a
        substituted list then replaces what the caller will send again, so the next request (or
        a restored session) finds its prefix in the caller's list."""
        prefix, replaced = self._prefix, self._replaced
        if prefix is None or not prefix.view or len(replaced) != prefix.length:
            return messages
        n = len(prefix.view)
        if messages[:n] != prefix.view:
            return messages
        return (*replaced, *messages[n:])

    def _substitute(self, request: Request) -> Request:
        """``request`` with the prefix the last compaction replaced swapped for its view: a
        concurrent or repeated call with the uncompacted list is not compacted again."""
        prefix = self._prefix
        if prefix is None or not 0 < prefix.length <= len(request.messages):
            return request
        head = request.messages[: prefix.length]
        if head != self._replaced:
            # A restored session knows the prefix by its digest only. A request that already
            # starts with the view is not taken apart (the digest costs ~9 us a message).
            if request.messages[: len(prefix.view)] == prefix.view:
                return request
            if prefix_digest(head) != prefix.digest:
                return request
            self._replaced = head  # later calls compare the messages
        return request.with_messages((*prefix.view, *request.messages[prefix.length :]))

    def record(
        self,
        usage: Usage,
        *,
        prompt_tokens: int | None = None,
        call_index: int | None = None,
        archive: bool = True,
    ) -> Usage:
        """``usage`` of a reply, tagged with the compaction in force and the time; the learned
        reserve learns the reply and the step (``prompt_tokens``: the sent prompt as the rule
        counted it; else the server's report, as a resumed archive does); archived (as model
        call ``call_index``) when archiving and ``archive``."""
        with self._state:
            stamped = dataclasses.replace(
                usage, compaction_id=self.compaction_id, timestamp=usage.timestamp or time.time()
            )
            prompt = usage.input_tokens if prompt_tokens is None else prompt_tokens
            self.learned = self.learned.after_call(prompt, stamped.output_tokens)
            if prompt == 0:  # no prompt size (llama.cpp's zeros): no step to measure from it
                self.learned = self.learned.after_compaction()
            self.max_request_tokens = max(self.max_request_tokens, stamped.input_tokens)
            index = len(self._archived) if call_index is None else call_index
        if self.archive is not None and archive:
            self.archive.append_usage(stamped, index)
        return stamped

    def observe(self, messages: Sequence[Message]) -> None:
        """Archive the messages not archived yet (the adapters hand over whole lists)."""
        if self.archive is None:
            return
        messages = tuple(messages)
        with self._state:
            # Safe to skip: each message of the last list was archived then or found archived
            # (`_archived` only grows), and an equal message has the same digest. Equality is
            # cheap here (shared field objects compare by identity) where the digest serialises
            # the whole message. A plain scan: the list most often differs from the last one
            # at its last message (the reply the usage was attached to), where a search by
            # prefix compares (`common_prefix`) compares the whole list twice.
            seen = self._observed
            start, end = 0, min(len(seen), len(messages))
            while start < end and (
                messages[start] is seen[start] or messages[start] == seen[start]
            ):
                start += 1
            digests = self._observed_digests[:start]
            if start == 0 and self._resumed_prefix is not None:
                digests = self._resumed(messages)  # a restored list: skipped whole
                start = len(digests)
            for message in messages[start:]:
                key = _digest(message)  # usage and meta left out: the adapters' keys too
                digests.append(key)
                if key not in self._archived and not message.is_summary:
                    self._archived.add(key)
                    self.archive.append_message(without_adapter_meta(message))
            self._observed, self._observed_digests = messages, digests

    def archived_already(self, messages: Iterable[Message]) -> None:
        """Know ``messages`` as archived (the session's archive, reopened, holds them): `observe`
        does not append them again, also when the state restored is older than the archive (a
        process killed after archiving a request, before saving its state)."""
        with self._state:
            self._archived.update(_digest(m) for m in messages)

    def _resumed(self, messages: tuple[Message, ...]) -> list[str]:
        """After a restore (called with ``_state`` held): the digests of the leading messages
        of ``messages`` that the restored `ArchivedPrefix` says are archived (now known
        archived), or none when ``messages`` do not start with that list."""
        resumed, self._resumed_prefix = self._resumed_prefix, None
        if resumed is None or not 0 < resumed.length <= len(messages):
            return []
        digests = [_digest(m) for m in messages[: resumed.length]]
        if text_digest("\n".join(digests)) != resumed.digest:
            return []  # another list than the one archived: each message checked on its own
        self._archived.update(digests)
        return digests

    def _emit(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, data)

    # -- saved state -----------------------------------------------------------------------------

    def snapshot(self) -> SessionState:
        """The session's numbers now, as a frozen value."""
        with self._state:
            return SessionState(
                window=self.window,
                compaction_id=self.compaction_id,
                compacted_at=self.compacted_at,
                compactions=tuple(self.compactions),
                summaries=tuple(self.summaries),
                overflows=self.overflows,
                learned=self.learned,
                max_request_tokens=self.max_request_tokens,
                turn=self.turn,
                turn_compactions=self.turn_compactions,
                floor_checked=self.floor_checked,
                whole_prompts=self.usage_trust.whole_prompts,
                passed_over=self.usage_trust.passed_over,
                owed=self._owed,
                prefix=self._prefix,
                # Restored from a state that listed the digests (version 1) and not observed
                # since: they are all this session knows archived, kept as they came.
                archived=frozenset(self._archived)
                if not self._observed_digests and self._resumed_prefix is None
                else frozenset(),
                archived_prefix=self._archived_prefix(),
            )

    def _archived_prefix(self) -> ArchivedPrefix | None:
        """The list observed last, all of it archived (called with ``_state`` held)."""
        if not self._observed_digests:
            return self._resumed_prefix  # restored, nothing observed since: still that list
        return ArchivedPrefix(
            length=len(self._observed_digests),
            digest=text_digest("\n".join(self._observed_digests)),
        )

    def apply(self, state: SessionState) -> None:
        """Continue from ``state`` (its window is one this session adopted, or an archive's)."""
        with self._state:
            window = validate_window(state.window)
            self.window = window
            self.policy = policy_for(self.policy_spec, window, self.max_output_tokens)
            self.compaction_id = state.compaction_id
            self.compacted_at = state.compacted_at
            self.compactions = list(state.compactions)
            self.summaries = list(state.summaries)
            self.overflows = state.overflows
            self.learned = state.learned
            self.max_request_tokens = state.max_request_tokens
            self.turn = state.turn
            self.turn_compactions = state.turn_compactions
            self.floor_checked = state.floor_checked
            self.usage_trust.whole_prompts = state.whole_prompts
            self.usage_trust.passed_over = state.passed_over
            self._owed = state.owed
            self._prefix, self._replaced = state.prefix, ()
            # What this session's archive holds stays known; the state adds what it lists.
            self._archived |= state.archived
            self._resumed_prefix = state.archived_prefix
            self._observed, self._observed_digests = (), []

    def save(self, store: SessionStore, key: str) -> bool:
        """Keep this session's state in ``store`` under ``key``; True when saved. Not in the
        session's own shared store when that holds more compactions than this session knows
        (another instance compacted during this request): the newer compaction is kept, else
        the next request would summarise its prefix again."""
        if store is self.store and key == self.key:
            stored = store.load(key)
            if stored is not None and len(stored.compactions) > len(self.compactions):
                return False
        store.save(key, self.snapshot())
        return True

    def restore(self, store: SessionStore, key: str) -> bool:
        """Continue the session saved under ``key``; False when there is none."""
        state = store.load(key)
        if state is None:
            return False
        self.apply(state)
        return True

    def report(self) -> dict[str, Any]:
        """The numbers: window, overflows, and each compaction (``ctxbudget demo`` keys)."""
        return {
            "window": self.window,
            "configured_window": self.configured_window,
            "overflows": self.overflows,
            "compactions": [c.to_json() for c in self.compactions],
        }


def without_adapter_meta(message: Message) -> Message:
    """``message`` without the adapters' ``ctxbudget_`` meta keys (what is archived or saved)."""
    meta = {k: v for k, v in message.meta.items() if not k.startswith(ADAPTER_META_PREFIX)}
    return dataclasses.replace(message, meta=meta)


def _digest(message: Message) -> str:
    """The message's identity in the archive: what the model reads. Usage and meta are left out:
    a message handed back to a framework and read again has lost them."""
    from ctxbudget.compaction.archive import text_digest
    from ctxbudget.compaction.records import message_to_record

    record = message_to_record(dataclasses.replace(message, usage=None, meta={}))
    return text_digest(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str))


def prefix_digest(messages: Sequence[Message]) -> str:
    """The identity of a list of messages: the digest of its messages' archive identities (what
    the model reads, usage and meta left out), so a prefix handed back by a framework, or read
    from a saved state, is recognised."""
    return text_digest("\n".join(_digest(m) for m in messages))


def text_digest(text: str) -> str:
    """`ctxbudget.compaction.archive.text_digest` (imported late, as the archive is)."""
    from ctxbudget.compaction.archive import text_digest as digest

    return digest(text)
