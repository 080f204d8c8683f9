"""`BudgetSession`: its loop decides as `Agent` does, concurrent callers never corrupt it or
summarise one prefix twice, and a saved session continues as the live one would."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.agent.conversations import long_conversation

from ctxbudget.agent.budget_session import (
    BudgetSession,
    MemorySessionStore,
    Reply,
    SessionState,
)
from ctxbudget.agent.events import CompactionRecord
from ctxbudget.agent.loop import Agent
from ctxbudget.counting import RequestCounter
from ctxbudget.errors import CompactionError, ContextOverflowError
from ctxbudget.messages.model import Message, Request
from ctxbudget.providers.base import Completion, Provider
from ctxbudget.providers.mock import MockProvider

# -- a conversation driven through `BudgetSession.run`, as `Agent` drives its own -----------------


@dataclasses.dataclass
class Driven:
    """What a driver run shows: the same numbers `Agent` keeps."""

    compactions: list[CompactionRecord]
    overflows: int
    window: int
    sent: list[tuple[int, int | None]]
    """Each request the server saw: (messages, max output)."""
    texts: list[str]
    error: str | None = None


def _drive(
    provider: Provider,
    session: BudgetSession,
    turns: int,
    queued: Callable[[int], None],
    scene: Any = None,
) -> Driven:
    """A tool-running chat on ``session.run``: the messages, the tools and the I/O are the
    driver's; every decision is the session's. ``scene`` plays the user (and the tools)."""
    scene = scene or getattr(provider, "scenario", None)
    assert scene is not None
    messages: tuple[Message, ...] = ()
    requests: list[Request] = []

    def request() -> Request:
        return Request(
            system=scene.system,
            tools=scene.tools,
            messages=messages,
            max_output_tokens=session.max_output_tokens,
        )

    def send(sent: Request) -> Completion:
        nonlocal messages
        messages = sent.messages  # the view the session compacted to
        requests.append(request())
        return provider.complete(requests[-1])

    def after(*checkpoints: Any) -> None:
        nonlocal messages
        messages = session.prepare(request(), summarizer=None, checkpoints=checkpoints).messages

    error = None
    try:
        for turn in range(1, turns + 1):
            queued(turn)
            session.begin_turn(turn)
            messages = (*messages, Message(role="user", content=scene.user_message(turn)))
            for _ in range(32):
                completion = session.run(
                    request(),
                    send,
                    reply=lambda c: Reply(c.usage, c.stop_reason),
                    checkpoints=("before_request",),
                )
                usage = session.record(completion.usage)
                reply = dataclasses.replace(completion.message, usage=usage)
                messages = (*messages, reply)
                if not reply.tool_calls:
                    after("after_step", "task_end")
                    break
                for call in reply.tool_calls:
                    output = scene.run_tool(call)
                    messages = (
                        *messages,
                        Message(role="tool", content=output, tool_call_id=call.id, name=call.name),
                    )
                after("after_step")
    except CompactionError as exc:
        error = str(exc).split(": ", 1)[-1]  # Agent's names the turn
    return Driven(
        compactions=list(session.compactions),
        overflows=session.overflows,
        window=session.window,
        sent=[(len(r.messages), r.max_output_tokens) for r in requests],
        texts=[m.text for m in messages],
        error=error,
    )


def _agent_run(
    agent: Agent, turns: int, queued: Callable[[int], None], scene: Any = None
) -> Driven:
    scene = scene or getattr(agent.provider, "scenario", None)
    assert scene is not None
    requests: list[Request] = []
    complete = agent.provider.complete

    def recorded(request: Request) -> Completion:
        requests.append(request)
        return complete(request)

    agent.provider.complete = recorded  # type: ignore[method-assign]
    error = None
    try:
        for turn in range(1, turns + 1):
            queued(turn)
            agent.run_turn(scene.user_message(turn))
    except CompactionError as exc:
        error = str(exc).split(": ", 1)[-1]
    return Driven(
        compactions=list(agent.compactions),
        overflows=agent.overflows,
        window=agent.window,
        sent=[(len(r.messages), r.max_output_tokens) for r in requests],
        texts=[m.text for m in agent.messages],
        error=error,
    )


def _twice_too_long(turn: int, provider: MockProvider) -> None:
    if turn == 3:
        provider.enqueue(ContextOverflowError("too long"), ContextOverflowError("still too long"))


CASES: list[tuple[str, dict[str, Any], int, str]] = [
    # scenario, settings (window, server_window, ...), turns, what it exercises
    ("chat", {"window": 1200}, 9, "pressure compactions, usage-first"),
    ("coding", {"window": 8192, "server_window": 4096}, 8, "an overflow, its window adopted"),
    ("coding", {"window": 32_768, "server_window": 4096, "max_output_tokens": None}, 6, "share"),
    ("coding", {"window": 8192, "policy": "codex", "max_compactions_per_turn": 1}, 6, "the cap"),
    ("coding", {"window": 8192, "policy": "pi"}, 4, "a fixed-reserve rule"),
    ("chat", {"window": 1200, "twice": True}, 4, "a second overflow"),
]


@pytest.mark.parametrize(("scenario", "settings", "turns", "what"), CASES)
def test_the_session_loop_decides_as_the_agent_does(
    qwen3: RequestCounter, scenario: str, settings: dict[str, Any], turns: int, what: str
) -> None:
    settings = dict(settings)
    server_window = settings.pop("server_window", None)
    twice = settings.pop("twice", False)
    window = settings["window"]

    def provider() -> MockProvider:
        return MockProvider(scenario, window=server_window or window, counter=qwen3)

    def queue(made: MockProvider) -> Callable[[int], None]:
        return (lambda turn: _twice_too_long(turn, made)) if twice else (lambda turn: None)

    first = provider()
    scene = first.scenario
    assert scene is not None
    options: dict[str, Any] = {"max_output_tokens": scene.max_output, **settings}
    agent = Agent(
        first,
        system=scene.system,
        tools=scene.tools,
        counter=qwen3,
        tool_executor=scene.run_tool,
        **options,
    )
    expected = _agent_run(agent, turns, queue(first))

    second = provider()
    session = BudgetSession(
        counter=qwen3,
        summarizer=second,
        served_window=second.served_window,
        provider_name=second.name,
        **options,
    )
    got = _drive(second, session, turns, queue(second))
    assert got == expected, what
    assert expected.sent  # the case ran


# -- concurrency ----------------------------------------------------------------------------------


class CountingSummarizer:
    """A summarizer that counts the prefixes it was asked to summarise, slowly; its window holds
    any fold (one call a compaction)."""

    window = 131_072

    def __init__(self) -> None:
        self.asked: list[str] = []
        self._lock = threading.Lock()

    def summarize(self, request: Request) -> str:
        with self._lock:
            self.asked.append(request.messages[0].text)
        threading.Event().wait(0.02)  # long enough for the other callers to arrive
        return "The user discussed many topics; nothing is pending."


def _session(qwen3: RequestCounter, summarizer: CountingSummarizer) -> BudgetSession:
    return BudgetSession(window=2048, counter=qwen3, summarizer=summarizer, strategy="summarize")


def test_threads_on_one_session_summarise_a_prefix_once(qwen3: RequestCounter) -> None:
    summarizer = CountingSummarizer()
    session = _session(qwen3, summarizer)
    request = long_conversation()
    sent: list[Request] = []
    lock = threading.Lock()

    def send(r: Request) -> str:
        with lock:
            sent.append(r)
        return "ok"

    with ThreadPoolExecutor(max_workers=8) as pool:
        done = [pool.submit(session.run, request, send, new_turn=True) for _ in range(8)]
    assert [f.result() for f in done] == ["ok"] * 8  # none raised
    assert len(summarizer.asked) == 1  # the others found the prefix replaced
    assert len(session.compactions) == 1 and len(sent) == 8
    assert all(r.messages == sent[0].messages for r in sent)  # all sent the one view
    assert qwen3.count(sent[0]).total < qwen3.count(request).total


def test_async_tasks_on_one_session_summarise_a_prefix_once(qwen3: RequestCounter) -> None:
    summarizer = CountingSummarizer()
    session = _session(qwen3, summarizer)
    request = long_conversation()

    async def send(r: Request) -> Request:
        await asyncio.sleep(0)
        return r

    async def main() -> list[Request]:
        return list(await asyncio.gather(*(session.arun(request, send) for _ in range(8))))

    sent = asyncio.run(main())
    assert len(summarizer.asked) == 1
    assert len(session.compactions) == 1
    assert all(r.messages == sent[0].messages for r in sent)


def test_a_client_resending_its_whole_history_gets_every_compaction_once(
    qwen3: RequestCounter,
) -> None:
    """A gateway's client sends its whole uncompacted history each time. After the second
    compaction too, the same list sent again (a retry) is answered with the stored view: the
    later compaction's prefix is the client's own list, not the first view plus the rest."""
    summarizer = CountingSummarizer()
    session = _session(qwen3, summarizer)
    request = long_conversation(turns=4)
    for step in range(16):
        first = session.prepare(request, new_turn=True)
        again = session.prepare(request, new_turn=True)
        assert again.messages == first.messages, f"step {step}"
        assert len(summarizer.asked) == len(session.compactions), f"step {step}"
        request = request.with_messages(
            (
                *request.messages,
                Message(role="assistant", content=f"noted {step}"),
                Message(role="user", content=f"topic {step}: " + "word " * 200),
            )
        )
    assert len(session.compactions) >= 2  # the case: a second compaction of a resent history


def test_concurrent_usage_records_are_not_lost(qwen3: RequestCounter) -> None:
    from ctxbudget.messages.usage import Usage

    session = BudgetSession(window=100_000, counter=qwen3)
    sizes = list(range(1, 401))

    def record(n: int) -> None:
        session.record(Usage(input_tokens=1000 + n, output_tokens=n))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(record, sizes))
    assert session.largest_reply == max(sizes)
    assert session.max_request_tokens == 1000 + max(sizes)


# -- saved state ----------------------------------------------------------------------------------


def test_a_saved_session_continues_as_the_live_one(qwen3: RequestCounter) -> None:
    """Mid-conversation (after an overflow adopted a window and a compaction), a session restored
    from the store makes the same decisions as the one that kept running."""
    scene_provider = MockProvider("coding", window=4096, counter=qwen3)
    scene = scene_provider.scenario
    assert scene is not None
    options: dict[str, Any] = {"window": 8192, "max_output_tokens": scene.max_output}
    live = BudgetSession(counter=qwen3, **options)
    _drive(scene_provider, live, 4, lambda turn: None)
    assert live.overflows == 1 and live.window == 4096 and live.compactions

    store = MemorySessionStore()
    live.save(store, "conversation-1")
    restored = BudgetSession(counter=qwen3, **options)
    assert restored.restore(store, "conversation-1")
    assert not BudgetSession(counter=qwen3, **options).restore(store, "another")
    assert restored.snapshot() == live.snapshot()

    # Both go on with the same next requests: the same decisions, the same records.
    growing = long_conversation(words=40, turns=25)
    for turn, cut in enumerate((11, 31, 51), start=1):
        request = growing.with_messages(growing.messages[:cut])
        outcomes = []
        for session in (live, restored):
            sent = session.run(request, lambda r: r, new_turn=True)
            outcomes.append((len(sent.messages), session.snapshot()))
        (n_live, live_state), (n_restored, restored_state) = outcomes
        assert n_live == n_restored, turn
        assert _without_times(live_state) == _without_times(restored_state), turn


def _without_times(state: SessionState) -> SessionState:
    return dataclasses.replace(state, compaction_id=None, compacted_at=None)


# -- the silent overflows: a reply cut by a smaller window, a prompt Ollama truncated ---------


@dataclasses.dataclass(frozen=True)
class _Talk:
    """A plain chat for a real (fake) server: long user turns, no tools."""

    texts: tuple[str, ...]
    system: str | None = None
    tools: tuple[Any, ...] = ()

    def user_message(self, turn: int) -> str:
        return self.texts[turn - 1]

    def run_tool(self, call: Any) -> str:
        raise AssertionError("no tools here")


def _silent_cases() -> list[Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_silent import _paragraph, _reply, ollama_like  # its scripted servers, shared

    def cut(counter: RequestCounter) -> dict[str, Any]:
        return {"replies": (_reply(1900, 148, "length"), _reply(600, 20)), "max_output": 512}

    def ollama(drop: bool, ps: bool) -> Callable[[RequestCounter], dict[str, Any]]:
        def make(counter: RequestCounter) -> dict[str, Any]:
            answer = ollama_like(2048, counter, [], drop_messages=drop, serve_ps=ps)
            return {"responder": answer, "max_output": 64}

        return make

    talk = _Talk(tuple(_paragraph(t) for t in range(1, 7)))
    return [
        pytest.param(cut, _Talk(("hello",)), id="cut-reply"),
        pytest.param(ollama(True, True), talk, id="ollama-drop-asked"),
        pytest.param(ollama(False, False), talk, id="ollama-half-window"),
    ]


@pytest.mark.parametrize(("server", "talk"), _silent_cases())
def test_the_session_loop_reads_silent_overflows_as_the_agent_does(
    server: Callable[[RequestCounter], dict[str, Any]], talk: _Talk
) -> None:
    from fakeserver import FakeServer  # on the path since test_silent's import

    from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

    counter = RequestCounter("qwen2.5")
    runs = []
    for kind in ("agent", "session"):
        spec = server(counter)
        max_output = spec.pop("max_output")
        replies = spec.pop("replies", ())
        with FakeServer(*replies, **spec) as fake:
            provider = OpenAICompatibleProvider(
                base_url=fake.base_url, model="my-model.gguf", api_key_env=None, window=8192
            )
            options: dict[str, Any] = {"window": 8192, "max_output_tokens": max_output}
            if kind == "agent":
                agent = Agent(provider, counter=counter, **options)
                runs.append(_agent_run(agent, len(talk.texts), lambda turn: None, talk))
            else:
                session = BudgetSession(
                    counter=counter,
                    served_window=provider.served_window,
                    provider_name=provider.name,
                    base_url=provider.base_url,
                    **options,
                )
                runs.append(_drive(provider, session, len(talk.texts), lambda turn: None, talk))
    expected, got = runs
    assert expected.overflows >= 1 and expected.window < 8192  # the case showed a window
    assert got == expected


def test_an_overflow_that_states_no_limit_makes_the_retry_smaller() -> None:
    # A server smaller than it says, refusing with no numbers (OpenAI's context_length_exceeded
    # on Responses, Ollama): compacting toward the window believed sent the same request again.
    request = long_conversation(words=100, turns=80)
    session = BudgetSession(counter=RequestCounter("qwen3"), window=34_000)
    refused = session.counter.count(request).total
    reserve = session.max_output_tokens
    assert refused + reserve < 34_000  # it fit the window we believed
    retry = session.recover(request, ContextOverflowError("maximum context length exceeded"))
    assert session.counter.count(retry).total < refused
    assert session.window <= refused + reserve


def test_the_agent_reads_an_overflow_with_no_limit_the_same_way(make_agent: Any) -> None:
    agent, provider, _ = make_agent("chat", window=34_000)
    turn = 0
    while agent.context_tokens() < 3_000:
        turn += 1
        provider.enqueue("fine")
        agent.run_turn(provider.scenario.user_message(turn))
    sent = agent.context_tokens()
    provider.enqueue(ContextOverflowError("maximum context length exceeded"), "fine")
    agent.run_turn(provider.scenario.user_message(turn + 1))
    assert agent.overflows == 1
    assert agent.window < 34_000  # about what it sent plus the reply room
    assert agent.compactions and agent.compactions[-1].trigger == "context_overflow"
    assert sent < 34_000 // 4  # it was refused far below the window it believed
