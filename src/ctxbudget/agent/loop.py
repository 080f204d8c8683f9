"""The agent loop: count (usage-first), check the rule, compact, request, recover from overflow.

Everything the session says goes to the archive before the loop moves on, so a session killed
at any moment resumes from its archive with nothing acknowledged lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxbudget.agent.budget_session import (
    DEFAULT_MAX_COMPACTIONS_PER_TURN,
    BudgetSession,
    Reply,
    SessionState,
    default_counter,
)
from ctxbudget.agent.compacting import still_over_window, undercount_scale
from ctxbudget.agent.events import CompactionRecord, EventSink, LoopEvent, SessionSummary, Trigger
from ctxbudget.agent.settings import restored_compactions
from ctxbudget.budget.context import RequestCounterLike, UsageTrust
from ctxbudget.budget.rules import Checkpoint, Policy, SessionEvidence
from ctxbudget.errors import CompactionError, ConfigError, ContextOverflowError, ProviderError
from ctxbudget.messages.model import Message, Request, ToolCall, ToolSpec
from ctxbudget.providers.base import Completion, Provider

if TYPE_CHECKING:
    from ctxbudget.compaction.archive import Archive, ArchiveState
    from ctxbudget.compaction.summarizer import Summarizer
    from ctxbudget.messages.usage import Usage

__all__ = [
    "DEFAULT_MAX_COMPACTIONS_PER_TURN",
    "DEFAULT_MAX_STEPS_PER_TURN",
    "Agent",
    "ToolExecutor",
]

ToolExecutor = Callable[[ToolCall], str]

# 32 model calls without a final answer is a runaway tool loop, not a task.
DEFAULT_MAX_STEPS_PER_TURN = 32


class Agent:
    """One chat session on a `Provider`, kept inside the window by a trigger rule.

    ``system`` is the system prompt (None: none; ``""`` an empty system message). ``window``
    defaults to the provider's. ``policy`` is a rule name (``ctxbudget`` by default)
    or a `Policy`. ``tools`` are executed by ``tool_executor``. Events go to ``on_event`` and,
    with the messages, usage and compactions, to ``archive``.
    """

    def __init__(
        self,
        provider: Provider,
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] = (),
        window: int | None = None,
        policy: str | Policy = "ctxbudget",
        strategy: str = "layered",
        counter: RequestCounterLike | str | None = None,
        summarizer: Summarizer | None = None,
        tool_executor: ToolExecutor | None = None,
        archive: Archive | None = None,
        on_event: EventSink | None = None,
        max_output_tokens: int | None = None,
        max_compactions_per_turn: int = DEFAULT_MAX_COMPACTIONS_PER_TURN,
        max_steps_per_turn: int = DEFAULT_MAX_STEPS_PER_TURN,
        model: str | None = None,
    ) -> None:
        chosen = window if window is not None else provider.window
        if chosen is None:
            raise ConfigError(f"no window for provider {provider.name!r}; pass window=N tokens")
        self.provider = provider
        if counter is None or isinstance(counter, str):
            counter = default_counter(counter or provider.tokenizer or "ctxbudget")
        self.counter: RequestCounterLike = counter
        self.session = BudgetSession(
            window=chosen,
            counter=counter,
            policy=policy,
            strategy=strategy,
            archive=archive,
            max_output_tokens=max_output_tokens,
            max_compactions_per_turn=max_compactions_per_turn,
            on_event=lambda kind, data: self._emit(kind, **data),
            served_window=provider.served_window,
            provider_name=provider.name,
            base_url=getattr(provider, "base_url", None),
        )
        """The budget: window, rule, learned reserve, cap, overflows and compactions."""
        self.configured_window = self.session.configured_window
        self.strategy = strategy
        self.summarizer = summarizer if summarizer is not None else _summarizer_of(provider)
        self.tool_executor = tool_executor
        self.archive = archive
        self.on_event = on_event
        self.max_steps_per_turn = max_steps_per_turn
        self.system = system
        self.tools = tuple(tools)
        self.model = model
        self.messages: tuple[Message, ...] = ()
        """The model's view: what the next request sends."""
        self.history: list[Message] = []
        """Everything ever said in the session, compacted or not."""
        self.turn = 0
        self._sent = Request()
        """The request last sent (what the server's usage reports on)."""
        self._sent_tokens = 0
        """``_sent``'s size as `context_tokens` gave it when it was sent."""
        self._built: Request | None = None
        """The request ``request()`` last made."""
        self._root: tuple[Message, ...] | None = None
        self._tip: tuple[Message, ...] | None = None
        """``self.messages`` was ``_root`` plus the messages ``_add`` appended since, while it
        is ``_tip``: then the next request is made by appending (``Request.append``), which
        spares the counter comparing the whole history."""

    @property
    def max_output_tokens(self) -> int:
        """The reply limit each request asks for: as configured, else a share of the window."""
        return self.session.max_output_tokens

    # The budget's numbers live in `self.session`; these read them where they always were.

    @property
    def window(self) -> int:
        """The window in force (the configured one, or a smaller one the server showed)."""
        return self.session.window

    @property
    def policy(self) -> Policy:
        """The rule in force for the window."""
        return self.session.policy

    @property
    def compaction_id(self) -> str | None:
        """The compaction the view is the result of (None before the first)."""
        return self.session.compaction_id

    @property
    def compactions(self) -> list[CompactionRecord]:
        """Every compaction so far, in order."""
        return self.session.compactions

    @property
    def overflows(self) -> int:
        """Requests the server refused as too long, or overflowed silently."""
        return self.session.overflows

    @property
    def max_request_tokens(self) -> int:
        """The largest prompt a server reported."""
        return self.session.max_request_tokens

    @property
    def largest_reply(self) -> int:
        """The largest reply so far (``learned.largest_reply``)."""
        return self.session.learned.largest_reply

    @property
    def learned(self) -> SessionEvidence:
        """The largest reply and step so far: the ``ctxbudget`` rule keeps that much free."""
        return self.session.learned

    @property
    def floor_tokens(self) -> int:
        """System prompt + tools, as last counted."""
        return self.session.floor_tokens

    @property
    def usage_trust(self) -> UsageTrust:
        """What the server's usage reports proved: a truncation, or a report passed over."""
        return self.session.usage_trust

    @property
    def max_compactions_per_turn(self) -> int:
        """The cap on pressure compactions in one turn."""
        return self.session.max_compactions_per_turn

    # -- the request ---------------------------------------------------------------------

    def request(self) -> Request:
        """The request the next call would send."""
        built, messages = self._built, self.messages
        head = (self.system, self.tools, self.max_output_tokens, self.model)
        if built is not None and head == (
            built.system,
            built.tools,
            built.max_output_tokens,
            built.model,
        ):
            if built.messages is messages:
                return built
            if self._tip is messages and self._root is built.messages:
                self._built = built.append(*messages[len(built.messages) :])
        request = self._built
        if request is None or request is built:
            request = self._built = Request(
                system=self.system,
                tools=self.tools,
                messages=messages,
                max_output_tokens=self.max_output_tokens,
                model=self.model,
            )
        # The same messages, as the request's tuple: the next appends extend it.
        self.messages = self._root = self._tip = request.messages
        return request

    def context_tokens(self) -> int:
        """The next request's size, usage-first (the provider's last count + what came since)."""
        return self.session.estimate(self.request()).tokens

    def check_floor(self) -> None:
        """Raise `PromptFloorExceeded` when system + tools + reply reserve exceed the window."""
        self.session.check_floor(self.request())

    # -- events and records --------------------------------------------------------------

    def _emit(self, kind: Any, **data: Any) -> None:
        event = LoopEvent(kind=kind, turn=self.turn, data=data)
        if self.archive is not None and kind not in ("usage", "compaction"):
            # Meta records merge by key on load: "event" keeps the latest, the file keeps all.
            self.archive.append_meta({"event": event.to_json()})
        if self.on_event is not None:
            self.on_event(event)

    def _add(self, message: Message) -> None:
        if self.archive is not None:
            self.archive.append_message(message)
        self.history.append(message)
        if self._tip is not self.messages:  # assigned since the last append
            self._root = self.messages
        self.messages = self._tip = (*self.messages, message)

    # -- one user turn -------------------------------------------------------------------

    def run_turn(self, text: str) -> Message:
        """Send one user message and run the model (and its tools) to a final answer."""
        self.turn += 1
        self.session.begin_turn(self.turn)
        self._emit("turn", user_chars=len(text))
        self._add(Message(role="user", content=text))
        return self._run()

    def pending(self) -> bool:
        """True when the last turn did not reach a final answer (a resumed, interrupted one)."""
        if not self.messages:
            return False
        last = self.messages[-1]
        return last.role != "assistant" or bool(last.tool_calls)

    def finish_turn(self) -> Message | None:
        """Complete an interrupted turn: run missing tool calls, then ask the model again."""
        if not self.pending():
            return None
        self.session.begin_turn(self.turn)
        # Killed between parallel tool results: answer the calls still open, in order.
        caller = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        if caller is not None and caller.tool_calls:
            self._run_tools(caller.tool_calls)
        return self._run()

    def _run(self) -> Message:
        if not self.session.floor_checked:
            self.check_floor()
        for _ in range(self.max_steps_per_turn):
            self._maybe_compact("before_request")
            reply = self._call()
            if reply.tool_calls:
                self._run_tools(reply.tool_calls)
                self._maybe_compact("after_step")
                continue
            self._maybe_compact("after_step", "task_end")
            return reply
        raise ProviderError(
            f"turn {self.turn}: the model made {self.max_steps_per_turn} calls without a final "
            "answer; stopped (raise max_steps_per_turn if the task needs more)"
        )

    def _run_tools(self, calls: Sequence[ToolCall]) -> None:
        # Results already in the view after the calling (last) assistant message: a resumed
        # session must not run them twice. A list, not a set: servers may repeat an empty id.
        caller = max((i for i, m in enumerate(self.messages) if m.role == "assistant"), default=-1)
        answered = [m.tool_call_id for m in self.messages[caller + 1 :] if m.role == "tool"]
        for call in calls:
            if call.id in answered:
                answered.remove(call.id)
                continue
            problem = call.argument_problem()
            if self.tool_executor is None:
                output = f"error: no tool executor for {call.name!r}"
            elif problem is not None:  # a model's malformed call is answered, not run
                output = f"error: {problem}"
            else:
                output = self.tool_executor(call)
            self._emit("tool", name=call.name, id=call.id, chars=len(output))
            self._add(Message(role="tool", content=output, tool_call_id=call.id, name=call.name))

    # -- the request and its recovery ----------------------------------------------------

    def _send(self) -> Completion:
        request = self.request()
        self._sent_tokens = self.context_tokens()
        self._emit("request", estimate=self._sent_tokens, messages=len(request.messages))
        self._sent = request
        return self.provider.complete(request)

    def _call(self) -> Message:
        session = self.session
        try:
            completion = self._send()
        except ContextOverflowError as exc:
            session.overflowed(exc, self._sent)
            self._compact("context_overflow", scale=self._undercount(exc))
            completion = self._resend()
        else:
            found = Reply(completion.usage, completion.stop_reason)
            if session.cut(self._sent, found) is not None:
                # The reply is dropped: it was cut by a window, not finished.
                self._compact("context_overflow")
                completion = self._resend()
        reply = self._record(completion)
        # A prompt the server silently shortened: its window is adopted and the view compacted
        # (the reply stays: the server answered the newest messages, which truncation keeps).
        if session.check_truncation(self._sent, completion.usage) is not None:
            self._compact("context_overflow")
        return reply

    def _resend(self) -> Completion:
        """The one retry after an overflow; a second overflow is a clear error."""
        try:
            return self._send()
        except ContextOverflowError as again:
            self.session.overflowed(again)
            raise CompactionError(f"turn {self.turn}: {still_over_window(again)}") from again

    def _undercount(self, exc: ContextOverflowError) -> float:
        """Our count over the server's, when the server said how long the prompt was (< 1)."""
        return undercount_scale(self.counter.count(self.request()).total, exc.prompt_tokens)

    def _record(self, completion: Completion) -> Message:
        # The prompt as the rule counted it when it was sent, so the next check measures the
        # step's growth on the same count it compares with the line.
        usage = self.session.record(
            completion.usage, prompt_tokens=self._sent_tokens, archive=False
        )
        reply = dataclasses.replace(completion.message, usage=usage)
        self._add(reply)
        if self.archive is not None:  # after its message, as a resumed session reads them
            self.archive.append_usage(usage, len(self.history) - 1)
        self._emit("usage", input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        return reply

    # -- compaction ------------------------------------------------------------------------

    def _maybe_compact(self, *checkpoints: Checkpoint) -> None:
        if self.session.should_compact(self.request(), checkpoints):
            self._compact("context_pressure")

    def _compact(self, trigger: Trigger, *, scale: float = 1.0) -> None:
        """Compact the view; ``scale`` < 1 lowers the line when our counter proved low."""
        compacted = self.session.compact(
            self.request(), trigger, scale=scale, summarizer=self.summarizer
        )
        self.messages = compacted.messages

    def restore(self, state: ArchiveState) -> None:
        """Continue the session ``state`` records (from ``Archive(path).resumed``)."""
        self.messages = tuple(state.view)
        self.history = list(state.history)
        self.turn = sum(1 for m in state.history if m.role == "user" and not m.is_summary)
        meta = state.meta
        window = meta.get("window")
        if not (isinstance(window, int) and not isinstance(window, bool) and window > 0):
            window = self.window
        overflows = meta.get("overflows")
        self.session.apply(
            SessionState(
                window=window,
                compaction_id=state.compaction_id,
                compactions=tuple(restored_compactions(meta)),
                overflows=overflows if isinstance(overflows, int) else 0,
                learned=_learned_from(u for _, u in state.usage),
                max_request_tokens=max((u.input_tokens for _, u in state.usage), default=0),
                turn=self.turn,
            )
        )

    # -- summary ---------------------------------------------------------------------------

    def summary(self, archive_path: str | Path | None = None) -> SessionSummary:
        """The session's numbers, as ``ctxbudget demo --json`` prints them."""
        path = archive_path
        if path is None and self.archive is not None:
            path = getattr(self.archive, "path", None)
        return SessionSummary(
            window=self.window,
            turns=self.turn,
            floor_tokens=self.floor_tokens,
            max_request_tokens=self.max_request_tokens,
            overflows=self.overflows,
            archive=str(path) if path is not None else None,
            compactions=tuple(self.compactions),
            configured_window=self.configured_window,
        )


def _learned_from(usages: Iterable[Usage]) -> SessionEvidence:
    """What an archived session taught the rule: its calls' usage in order, a change of
    compaction id between two calls being a compaction (the archive keeps no local counts, so
    the provider's prompt sizes stand in; an all-zero report teaches nothing about growth)."""
    learned, compaction_id = SessionEvidence(), None
    for usage in usages:
        if usage.compaction_id != compaction_id:
            learned = learned.after_compaction()
        compaction_id = usage.compaction_id
        learned = learned.after_call(usage.input_tokens, usage.output_tokens)
        if usage.input_tokens == 0:  # no prompt size (llama.cpp): no step to measure from it
            learned = learned.after_compaction()
    return learned


def _summarizer_of(provider: Provider) -> Summarizer | None:
    summarize = getattr(provider, "summarize", None)
    return provider if callable(summarize) else None  # type: ignore[return-value]
