"""Conversation identity without the client's help, and one `BudgetSession` per conversation.

Clients resend the whole history on every call. A conversation is recognised by what it
starts with:

- In memory, each live conversation is known by the chain digest of the item list it last
  sent (`item_chain`: one digest per prefix, each the hash of the one before and the next item,
  so all prefixes of a request cost one pass). A request whose list starts with a live
  conversation's last list continues it. A request that does not (a client that edited an
  earlier message, a new task) is a new conversation: the budget decisions of one never leak
  into another, and two conversations never share a compacted view unless they start with the
  very same messages (then the view is the same too).
- In the store, a conversation's state is saved under ``API:ID``, its ID the chain digest of
  the list it was first seen with, so after a restart (or after it left memory) a request is
  matched by looking up its own prefixes' digests, longest first. A state found is taken only
  when the prefix its compaction replaced (`SessionState.prefix`, by `prefix_digest`) is still
  the request's prefix, so the stored compaction is reused with no second summary call.
- Several gateway instances may share one store (``--state redis://...``): each session is
  built with the store and its key, so a compaction is made once across them (under the
  store's lock) and a save never puts an older state over a newer compaction; a live
  conversation takes over a compaction another instance saved before each request.

The compacted view itself, the decision to compact and the retry are the session's: the same
contract `guard_openai` has (`BudgetSession.prepare` replaces the prefix by its view).

Each conversation's archive (the existing format, append-only, created 0600) is
``archives/API-ID.jsonl`` next to the state file; ``ctxbudget replay`` reads it. An archive has
one writer (it holds the file's lock while open), so when another instance on this machine has
that file open (two instances sharing one archive folder), this one writes the conversation's
records to the first free ``API-ID.wN.jsonl`` (N = 2, 3, ...): each file is a whole archive of
what its instance archived, and ``ctxbudget replay FOLDER`` reads them all. A file name taken
by lock, not by a configured instance id: a restarted instance finds its files again and two
instances never need telling apart. A request never fails because of its archive: when no file
can be opened (every candidate busy, a folder not writable, a file that is not an archive) the
conversation goes on unarchived, with a warning in the log.

Durability, and what a reply waits for. Records are written as they come (before the reply:
a killed gateway loses none written). They are fsynced once a request, and only then is the
conversation's state saved (`Conversations.save`): the state never says a message is archived
that a stopped machine could lose. Both run after the reply, off its path (`after_reply`),
except for a conversation's first request here, which waits for them (the state saved is what
another instance sharing the store finds the conversation by); the conversation's next request
here waits until they are done before it looks anything up (`find`, `settled`). A compaction is
saved when it is made, under the store's lock (`BudgetSession.compact`), before the request it
compacts is forwarded, so another instance never makes it again. What this trades: a gateway
killed in the milliseconds between a reply and its save restarts from the state before that
reply (the numbers of one step; nothing archived twice: what a reopened archive holds is known
archived); a machine that stops loses at most the records of the requests in flight or whose
fsync had not run yet; another instance may take a conversation's next request up with the
state of the step before (compactions are never missed: they are saved when made).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from ctxbudget.agent.budget_session import (
    BudgetSession,
    EventSink,
    SessionState,
    SessionStore,
    prefix_digest,
)
from ctxbudget.budget.context import RequestCounterLike
from ctxbudget.budget.floor import one_line
from ctxbudget.compaction.archive import Archive, ArchiveInUseError
from ctxbudget.compaction.archive_file import open_regular
from ctxbudget.errors import ArchiveError, CtxbudgetError
from ctxbudget.gateway.api import Parsed
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.depth import ItemKeys
from ctxbudget.integrations._view import UsageMemory
from ctxbudget.messages.model import Message, Request

if TYPE_CHECKING:
    from ctxbudget.gateway.discover import ServedWindows

__all__ = [
    "MAX_STORE_LOOKUPS",
    "ChainMemo",
    "Conversation",
    "Conversations",
    "item_chain",
]

log = logging.getLogger("ctxbudget.gateway")

MAX_ARCHIVE_WRITERS = 16
"""The most archive files of one conversation (one per instance that has it open at once)."""

MAX_STORE_LOOKUPS = 4096
"""The most prefixes of one request looked up in the store (longest first): a conversation
resumed after a restart is found by the list it was first seen with, which is rarely longer."""


def item_chain(
    api: str, head: Any, items: Sequence[Any], keys: ItemKeys | None = None
) -> list[bytes]:
    """The identity of each prefix of ``items``: ``out[i]`` stands for ``items[: i + 1]`` (with
    the ``head`` that frames them, in API ``api``). Items are hashed as canonical JSON (sorted
    keys), so a client that reorders an object's keys is still recognised; ``keys``: that JSON
    where the caller made it already (`DepthMemo.body_depth`), by the item's ``id()``."""
    state = hashlib.blake2b(
        api.encode() + b"\0" + orjson.dumps(head, option=orjson.OPT_SORT_KEYS), digest_size=16
    ).digest()
    out: list[bytes] = []
    blake2b, dumps, sort_keys = hashlib.blake2b, orjson.dumps, orjson.OPT_SORT_KEYS
    known = keys or {}
    for item in items:
        # The same digest as blake2b(state + item's JSON), without copying the two together.
        step = blake2b(state, digest_size=16)
        key = known.get(id(item))
        step.update(dumps(item, option=sort_keys) if key is None else key)
        state = step.digest()
        out.append(state)
    return out


MAX_NEW_ITEMS = 256
"""`ChainMemo` looks for a remembered list at most this many items before a request's end."""


class ChainMemo:
    """`item_chain` of a list that continues one seen before, hashing only the items after it:
    an agent's request is its last one and a step, so all but a few digests were made already
    (~1 ms of hashing at ~130K tokens). The digests are exactly `item_chain`'s (stored
    conversations keep their ids).

    A list is remembered by its items' canonical JSON (`ItemKeys`, the same bytes the digests
    hash), and a request takes over a remembered chain only when its items start with exactly
    those bytes (compared in full, not by digest), in the same API and under the same head: the
    digests of that prefix are then the very ones `item_chain` would make. The key objects are
    mostly those `DepthMemo` keeps (it hands out one object per value), so this holds little
    of its own; it is bounded by ``max_bytes`` of keys referred to (the oldest dropped)."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._lists: OrderedDict[tuple[str, bytes, int, bytes], _Chained] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hashed = 0
        """Items hashed so far (tests read it)."""

    def chain(
        self, api: str, head: Any, items: Sequence[Any], keys: ItemKeys | None
    ) -> list[bytes]:
        """``item_chain(api, head, items, keys)``, from a remembered prefix where one holds."""
        known = keys or {}
        item_keys = list(map(known.get, map(id, items)))
        if not item_keys or None in item_keys:
            self.hashed += len(items)
            return item_chain(api, head, items, keys)
        full = cast("list[bytes]", item_keys)
        head_key = orjson.dumps(head, option=orjson.OPT_SORT_KEYS)
        n = len(full)
        found: _Chained | None = None
        with self._lock:
            for length in range(n, max(0, n - MAX_NEW_ITEMS), -1):
                candidate = self._lists.get((api, head_key, length, full[length - 1]))
                if candidate is not None and candidate.keys == full[:length]:
                    # Continued: the longer list stands for it from now on (one entry a
                    # conversation; a client that sends the shorter one again hashes it again).
                    found = candidate
                    del self._lists[(api, head_key, length, full[length - 1])]
                    self._bytes -= candidate.size
                    break
        if found is None:
            chain = item_chain(api, head, items, keys)
            self.hashed += n
        else:
            start = len(found.keys)
            chain = [*found.chain, *_chain_from(found.chain[-1], full[start:])]
            self.hashed += n - start
        self._remember((api, head_key, n, full[-1]), _Chained(full, chain))
        return chain

    def _remember(self, key: tuple[str, bytes, int, bytes], value: _Chained) -> None:
        size = sum(map(len, value.keys))
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._lists.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            value.size = size
            self._lists[key] = value
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, dropped = self._lists.popitem(last=False)
                self._bytes -= dropped.size


@dataclass(slots=True)
class _Chained:
    keys: list[bytes]
    chain: list[bytes]
    size: int = 0


def _chain_from(state: bytes, keys: Sequence[bytes]) -> list[bytes]:
    """The digests `item_chain` makes after ``state`` for items of canonical JSON ``keys``."""
    out: list[bytes] = []
    blake2b = hashlib.blake2b
    for key in keys:
        step = blake2b(state, digest_size=16)
        step.update(key)
        state = step.digest()
        out.append(state)
    return out


@dataclass(slots=True, eq=False)
class Conversation:
    """One conversation: its session, archive, the usage of its last reply, and its numbers."""

    id: str
    api: str
    session: BudgetSession
    archive: Archive | None
    memory: UsageMemory = field(default_factory=UsageMemory)
    """The last list sent (as the client sent it) and the usage of its reply."""
    endpoint: bytes | None = None
    """The chain digest of the list this conversation last sent."""
    requests: int = 0
    last_tokens: int = 0
    """What was counted for the last request forwarded."""
    last_client_tokens: int = 0
    """What the client's own list counted, before any compaction (0 when not counted)."""
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    pending: int = 0
    """Work after its replies (`Conversations.after_reply`) started and not ended."""
    evicted: bool = False
    """Dropped from memory (`Conversations._evict`): its archive closes once nothing is
    pending."""

    @property
    def key(self) -> str:
        """The state store's key."""
        return f"{self.api}:{self.id}"

    def status(self) -> dict[str, Any]:
        """This conversation for ``GET /ctxbudget/status``."""
        from ctxbudget.gateway.status_page import conversation_status

        return dict(
            conversation_status(
                self.id,
                self.session,
                tokens=self.last_tokens,
                api=self.api,
                requests=self.requests,
                created=self.created,
                updated=self.updated,
            )
        )


class Conversations:
    """Every conversation of one gateway: found or created per request, saved after each."""

    def __init__(
        self,
        config: GatewayConfig,
        store: SessionStore,
        *,
        window: int,
        provider_name: str | None = None,
        base_url: str | None = None,
        on_event: EventSink | None = None,
        served_windows: ServedWindows | None = None,
    ) -> None:
        self.on_event = on_event
        self.served_windows = served_windows
        """Asks the upstream the context a conversation's model is served with, after a
        truncated prompt (Ollama's ``/api/ps``); None: never asked."""
        self.config = config
        self.store = store
        self.window = window
        self.provider_name = provider_name
        self.base_url = base_url
        self.archive_dir = config.archive_dir or _default_archive_dir(config)
        self._live: OrderedDict[str, Conversation] = OrderedDict()
        """Live conversations by key, least recently used first."""
        self._by_endpoint: dict[bytes, Conversation] = {}
        self._lock = threading.Lock()
        self.chains = ChainMemo()
        """The digests of lists seen before (`ChainMemo`): a request hashes only its new items."""
        self._after: dict[str, tuple[asyncio.Task[None], Conversation]] = {}
        """Each conversation's work after its reply (`after_reply`), by key, while it runs."""

    # -- finding ---------------------------------------------------------------------------------

    async def find(
        self,
        api: str,
        parsed: Parsed,
        chain: list[bytes] | None = None,
        *,
        refresh: bool = True,
    ) -> Conversation:
        """The conversation ``parsed`` continues, else a new one (``chain``: its `item_chain`,
        when the caller has it already). A live one is brought up to date with the shared
        store (`refresh`, in a worker thread); with ``refresh=False`` the caller runs `refresh`
        itself, in the worker thread it runs the session's decision in (one hop, not two),
        before that decision."""
        if chain is None:
            chain = item_chain(api, parsed.head, parsed.translated.items)
        with self._lock:
            for digest in reversed(chain):
                found = self._by_endpoint.get(digest)
                if found is not None:
                    self._live.move_to_end(found.key)
                    break
            else:
                found = None
        if found is None:
            # A conversation dropped from memory is found in the store: once its save is in.
            await self.settled(evicted_only=True)
            return await asyncio.to_thread(self._resume_or_create, api, parsed, chain)
        await self.settled(found)  # its last reply's usage recorded, its state saved
        if refresh:
            await asyncio.to_thread(self.refresh, found)
        return found

    def refresh(self, conversation: Conversation) -> None:
        """Take over a newer compaction of ``conversation`` that another instance saved in the
        shared store since this one last saw it (its view is then the one forwarded here too).
        Blocking (the store's read): call it from a worker thread."""
        session = conversation.session
        stored = self.store.load(conversation.key)
        if stored is not None and len(stored.compactions) > len(session.compactions):
            session.apply(stored)

    async def view(self, api: str, parsed: Parsed) -> tuple[RequestCounterLike, Request]:
        """What would be forwarded for ``parsed`` and the counter it is counted with, changing
        nothing: its conversation's stored compaction in place of the prefix it replaced (the
        live session's, else one in the store), else ``parsed.request`` as it came."""
        chain = item_chain(api, parsed.head, parsed.translated.items)
        messages = parsed.request.messages
        await self.settled(evicted_only=True)
        with self._lock:
            live = next((c for d in reversed(chain) if (c := self._by_endpoint.get(d))), None)
        if live is not None:
            state: SessionState | None = live.session.snapshot()
            counter = live.session.counter
        else:
            state = await asyncio.to_thread(self._stored_state, api, messages, chain)
            counter = self._counter(parsed)
        if state is None or state.prefix is None or not _prefix_holds(state, messages):
            return counter, parsed.request
        view = (*state.prefix.view, *messages[state.prefix.length :])
        return counter, parsed.request.with_messages(view)

    def _stored_state(
        self, api: str, messages: tuple[Message, ...], chain: list[bytes]
    ) -> SessionState | None:
        for digest in list(reversed(chain))[:MAX_STORE_LOOKUPS]:
            state = self.store.load(f"{api}:{digest.hex()}")
            if state is not None and _prefix_holds(state, messages):
                return state
        return None

    def _resume_or_create(self, api: str, parsed: Parsed, chain: list[bytes]) -> Conversation:
        messages = parsed.request.messages
        for digest in list(reversed(chain))[:MAX_STORE_LOOKUPS]:
            key = f"{api}:{digest.hex()}"
            with self._lock:
                if key in self._live:
                    continue  # live, and this list does not continue it: an edit
            state = self.store.load(key)
            if state is not None and _prefix_holds(state, messages):
                return self._register(api, digest.hex(), parsed, state)
        return self._register(api, chain[-1].hex() if chain else "empty", parsed, None)

    def _register(
        self, api: str, conversation_id: str, parsed: Parsed, state: SessionState | None
    ) -> Conversation:
        with self._lock:
            key = f"{api}:{conversation_id}"
            suffix = 1
            while key in self._live:  # a new list equal to an older one of a live conversation
                suffix += 1
                key = f"{api}:{conversation_id}-{suffix}"
            conversation_id = key.split(":", 1)[1]
            session = self._session(parsed, f"{api}-{conversation_id}", key)
            if session.archive is not None:
                # What the reopened file holds is archived, whatever the state says: a state
                # saved after a reply may be one request behind its archive (see `after_reply`).
                session.archived_already(session.archive.resumed.history)
            if state is not None:
                session.apply(state)
            elif session.archive is not None and "window" not in session.archive.resumed.meta:
                # What replay needs to draw the curve: the window and the model.
                session.archive.append_meta(
                    {"window": session.window, "model": parsed.model, "api": api}
                )
            conversation = Conversation(
                id=conversation_id, api=api, session=session, archive=session.archive
            )
            self._live[key] = conversation
            self._evict()
            return conversation

    def _counter(self, parsed: Parsed) -> RequestCounterLike:
        from ctxbudget.counting import RequestCounter  # loads a vocabulary on first use

        return RequestCounter(self.config.tokenizer, model=parsed.model)

    def _session(self, parsed: Parsed, name: str, key: str) -> BudgetSession:
        """The session of the conversation saved under ``key``: compacting under the store's
        lock for it, saving there without overwriting a newer compaction. A truncated prompt
        makes it ask the upstream what its model is served with (`served_windows`)."""
        served = self.served_windows
        return BudgetSession(
            window=self.window,
            counter=self._counter(parsed),
            policy=self.config.policy,
            strategy=self.config.strategy,
            archive=self._archive(name),
            max_output_tokens=self.config.max_output_tokens,
            provider_name=self.provider_name,
            base_url=self.base_url,
            on_event=self.on_event,
            store=self.store,
            key=key,
            served_window=None if served is None else served.reader(parsed.model),
        )

    def _archive(self, name: str) -> Archive | None:
        """The conversation's archive: ``NAME.jsonl``, else (another instance has that open)
        the first free ``NAME.wN.jsonl``; None, with a warning, when none can be opened."""
        for writer in range(1, MAX_ARCHIVE_WRITERS + 1):
            path = self.archive_dir / (
                f"{name}.jsonl" if writer == 1 else f"{name}.w{writer}.jsonl"
            )
            try:
                _create_private(path)
                return Archive(path, sync_each_record=False)  # fsynced once a request: `save`
            except ArchiveInUseError:
                continue
            except CtxbudgetError as exc:  # not writable, not an archive: go on without one
                log.warning("conversation %s is not archived: %s", name, one_line(str(exc)))
                return None
        log.warning(
            "conversation %s is not archived: its %d archive files are all in use",
            name,
            MAX_ARCHIVE_WRITERS,
        )
        return None

    def _evict(self) -> None:
        """Keep at most ``max_live_conversations`` in memory (called with the lock held); the
        one dropped was saved after its last request and is found again in the store."""
        while len(self._live) > self.config.max_live_conversations:
            _, old = self._live.popitem(last=False)
            if old.endpoint is not None and self._by_endpoint.get(old.endpoint) is old:
                del self._by_endpoint[old.endpoint]
            old.evicted = True
            if old.archive is not None and not old.pending:
                old.archive.close()  # else once its save is done (`_done_after_reply`)

    # -- after a request ---------------------------------------------------------------------------

    def sent(
        self,
        conversation: Conversation,
        parsed: Parsed,
        api: str,
        chain: list[bytes] | None = None,
    ) -> None:
        """``parsed`` was forwarded for ``conversation``: its list is the one a next request
        continues, and the usage of its reply will attach to the reply that follows it
        (``chain``: its `item_chain`, when the caller has it already)."""
        if chain is None:
            chain = item_chain(api, parsed.head, parsed.translated.items)
        with self._lock:
            old = conversation.endpoint
            if old is not None and self._by_endpoint.get(old) is conversation:
                del self._by_endpoint[old]
            conversation.endpoint = chain[-1] if chain else None
            if conversation.endpoint is not None:
                self._by_endpoint[conversation.endpoint] = conversation
            conversation.memory.sent = parsed.request.messages
            conversation.memory.usage = None
            conversation.requests += 1
            conversation.updated = time.time()

    async def after_reply(self, conversation: Conversation, work: Any = None) -> None:
        """Run ``work`` (default: `save`) for ``conversation`` in a worker thread, once the work
        after its previous reply is done. Its first request here waits for it: the state saved
        is what another instance sharing the store finds the conversation by (else it would
        start one of its own, and summarise its prefix again). Later ones do not: the reply goes
        out while it runs, and the conversation's next request here waits for it (`find`). A
        failure then is logged (the reply is the client's already)."""
        job = (lambda: self.save(conversation)) if work is None else work
        key = conversation.key
        before = self._after.get(key, (None, None))[0]
        with self._lock:
            conversation.pending += 1
        if conversation.requests <= 1:
            try:
                await self.settled(conversation)
                await asyncio.to_thread(job)
            finally:
                self._done_after_reply(conversation)
            return

        async def after() -> None:
            try:
                if before is not None:
                    await asyncio.wait([before])
                await asyncio.to_thread(job)
            except Exception as exc:  # logged: no request is left to fail
                log.warning(
                    "saving conversation %s failed: %s", conversation.id, one_line(str(exc))
                )
            finally:
                self._done_after_reply(conversation)

        task = asyncio.get_running_loop().create_task(after())
        self._after[key] = (task, conversation)

        def done(finished: asyncio.Task[None]) -> None:
            if self._after.get(key, (None, None))[0] is finished:
                del self._after[key]

        task.add_done_callback(done)

    def _done_after_reply(self, conversation: Conversation) -> None:
        """One piece of work after a reply of ``conversation`` ended: an archive left open for
        it by `_evict` is closed once none is left."""
        with self._lock:
            conversation.pending -= 1
            close = conversation.evicted and conversation.pending == 0
        if close and conversation.archive is not None:
            try:
                conversation.archive.close()
            except ArchiveError as exc:
                log.warning("archive of %s: %s", conversation.id, one_line(str(exc)))

    async def settled(
        self, conversation: Conversation | None = None, *, evicted_only: bool = False
    ) -> None:
        """Wait until the work after ``conversation``'s replies is done (every conversation's
        when None; with ``evicted_only``, only those dropped from memory: the others are found
        live, not in the store)."""
        if conversation is not None:
            found = self._after.get(conversation.key)
            pending = [found[0]] if found is not None else []
        else:
            pending = [t for t, c in self._after.values() if c.evicted or not evicted_only]
        if pending:
            await asyncio.wait(pending)

    def save(self, conversation: Conversation) -> None:
        """Fsync the request's archive records, then save the conversation's state (blocking:
        call it from a worker thread, `after_reply` does); a state older than a compaction
        another instance saved is not written over it. The fsync comes first: the state says
        which messages are archived, which a resumed session does not append again."""
        if conversation.archive is not None:
            try:
                conversation.archive.sync()
            except ArchiveError as exc:  # the reply is the client's either way
                log.warning("archive of %s: %s", conversation.id, one_line(str(exc)))
        conversation.session.save(self.store, conversation.key)

    def attach_usage(self, conversation: Conversation, messages: tuple[Message, ...]) -> Any:
        """``messages`` with the last reply's usage on that reply (the usage-first base)."""
        return conversation.memory.attach(messages)

    def status(self) -> list[dict[str, Any]]:
        """Every live conversation, most recent first."""
        with self._lock:
            live = list(self._live.values())
        return [c.status() for c in reversed(live)]

    def __len__(self) -> int:
        """Conversations live in memory now."""
        with self._lock:
            return len(self._live)

    def close(self) -> None:
        """Close every archive (the states are saved after each request)."""
        with self._lock:
            for conversation in self._live.values():
                if conversation.archive is not None:
                    conversation.archive.close()
            self._live.clear()
            self._by_endpoint.clear()


def _prefix_holds(state: SessionState, messages: tuple[Message, ...]) -> bool:
    """True when ``state`` has no compacted prefix, or ``messages`` still start with it."""
    prefix = state.prefix
    if prefix is None:
        return True
    if not 0 < prefix.length <= len(messages):
        return False
    return prefix_digest(messages[: prefix.length]) == prefix.digest  # usage is left out


def _default_archive_dir(config: GatewayConfig) -> Path:
    from ctxbudget.agent.session_store import default_state_path

    state = config.state
    if state is None or "://" in str(state):  # a shared store (URL): archives stay local
        state = default_state_path()
    return Path(state).parent / "archives"


def _create_private(path: Path) -> None:
    """Create ``path`` 0600 (its folder 0700) when missing, before the archive opens it."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"{path.parent}: cannot create it ({exc.strerror})") from None
    os.close(open_regular(path, os.O_WRONLY | os.O_CREAT, mode=0o600))
