"""The agent loop: count (usage-first), check the rule, compact, request, recover from overflow.

Everything the session says goes to the archive before the loop moves on, so a session killed
at any moment resumes from its archive with nothing acknowledged lost.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxbudget.agent.compacting import (
    adopt_window,
    compact_under_line,
    still_over_window,
    undercount_scale,
)
from ctxbudget.agent.events import CompactionRecord, EventSink, LoopEvent, SessionSummary, Trigger
from ctxbudget.agent.settings import (
    effective_max_output,
    policy_for,
    reply_reserve,
    restored_compactions,
)
from ctxbudget.agent.silent import (
    SilentOverflow,
    cut_reply,
    half_window,
    served_overflow,
    truncated_prompt,
)
from ctxbudget.budget.context import RequestCounterLike, UsageTrust, context_tokens
from ctxbudget.budget.floor import check_prompt_floor, one_line
from ctxbudget.budget.rules import Checkpoint, Policy, SessionEvidence, validate_window
from ctxbudget.errors import CompactionError, ConfigError, ContextOverflowError, ProviderError
from ctxbudget.messages.model import Message, Request, ToolCall, ToolSpec
from ctxbudget.providers.base import Completion, Provider

if TYPE_CHECKING:
    from ctxbudget.compaction.archive import Archive, ArchiveState
    from ctxbudget.compaction.strategies import CompactionResult
    from ctxbudget.compaction.summarizer import Summarizer
    from ctxbudget.messages.usage import Usage

__all__ = [
    "DEFAULT_MAX_COMPACTIONS_PER_TURN",
    "DEFAULT_MAX_STEPS_PER_TURN",
    "Agent",
    "ToolExecutor",
]

ToolExecutor = Callable[[ToolCall], str]

# 3: enough for one compaction before a request, one after a long tool step and one on
# overflow; a cap at all makes a compaction loop impossible (Codex users reported 111
# compactions in one turn).
DEFAULT_MAX_COMPACTIONS_PER_TURN = 3
# 32 model calls without a final answer is a runaway tool loop, not a task.
DEFAULT_MAX_STEPS_PER_TURN = 32


def _default_counter(name: str) -> RequestCounterLike:
    from ctxbudget.counting import RequestCounter  # imported late: loads a vocabulary

    counter: RequestCounterLike = RequestCounter(name)
    return counter


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
        self.window = validate_window(chosen)
        self.configured_window = self.window
        self._policy_spec = policy
        self._max_output_setting = max_output_tokens
        self.policy = policy_for(policy, self.window, self.max_output_tokens)
        self.strategy = strategy
        if counter is None or isinstance(counter, str):
            counter = _default_counter(counter or provider.tokenizer or "ctxbudget")
        self.counter: RequestCounterLike = counter
        self.summarizer = summarizer if summarizer is not None else _summarizer_of(provider)
        self.tool_executor = tool_executor
        self.archive = archive
        self.on_event = on_event
        self.max_compactions_per_turn = max_compactions_per_turn
        self.max_steps_per_turn = max_steps_per_turn
        self.system = system
        self.tools = tuple(tools)
        self.model = model
        self.messages: tuple[Message, ...] = ()
        """The model's view: what the next request sends."""
        self.history: list[Message] = []
        """Everything ever said in the session, compacted or not."""
        self.turn = 0
        self.compaction_id: str | None = None
        self.compactions: list[CompactionRecord] = []
        self.overflows = 0
        self.max_request_tokens = 0
        self.learned = SessionEvidence()
        """The largest reply and step so far: the ``ctxbudget`` rule keeps that much free."""
        self.floor_tokens = 0
        self._turn_compactions = 0
        self._floor_checked = False
        self._sent = Request()
        """The request last sent (what the server's usage reports on)."""
        self.usage_trust = UsageTrust()
        """What the server's usage reports proved: a truncation, or a report passed over."""
        self._built: Request | None = None
        """The request ``request()`` last made."""
        self._root: tuple[Message, ...] | None = None
        self._tip: tuple[Message, ...] | None = None
        """``self.messages`` was ``_root`` plus the messages ``_add`` appended since, while it
        is ``_tip``: then the next request is made by appending (``Request.append``), which
        spares the counter comparing the whole history."""

    @property
    def largest_reply(self) -> int:
        """The largest reply so far (``learned.largest_reply``)."""
        return self.learned.largest_reply

    @property
    def max_output_tokens(self) -> int:
        """The reply limit each request asks for: as configured, else a share of the window."""
        return effective_max_output(self.window, self._max_output_setting)

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
        estimate = context_tokens(self.request(), self.counter, compaction_id=self.compaction_id)
        self.usage_trust.note(estimate.passed_over)
        return estimate.tokens

    def check_floor(self) -> None:
        """Raise `PromptFloorExceeded` when system + tools + reply reserve exceed the window."""
        request = self.request()
        count = self.counter.count(request)
        self.floor_tokens = count.floor
        reserve = reply_reserve(self.policy, self.window, self.max_output_tokens)
        check_prompt_floor(
            count,
            self.window,
            reserve,
            provider_name=self.provider.name,
            base_url=getattr(self.provider, "base_url", None),
            request=request,
        )
        self._floor_checked = True

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
        self._turn_compactions = 0
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
        self._turn_compactions = 0
        # Killed between parallel tool results: answer the calls still open, in order.
        caller = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        if caller is not None and caller.tool_calls:
            self._run_tools(caller.tool_calls)
        return self._run()

    def _run(self) -> Message:
        if not self._floor_checked:
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
        self._emit("request", estimate=self.context_tokens(), messages=len(request.messages))
        self._sent = request
        return self.provider.complete(request)

    def _call(self) -> Message:
        try:
            completion = self._send()
        except ContextOverflowError as exc:
            self._overflowed(exc)
            self._compact("context_overflow", scale=self._undercount(exc))
            completion = self._resend()
        else:
            cut = cut_reply(
                completion.usage,
                completion.stop_reason,
                asked=self._sent.max_output_tokens or self.max_output_tokens,
                window=self.window,
            )
            if cut is not None:  # the reply is dropped: it was cut by a window, not finished
                self._silent_overflow(cut, completion.usage.input_tokens, "length")
                self._compact("context_overflow")
                completion = self._resend()
        reply = self._record(completion)
        self._check_truncation(completion)
        return reply

    def _resend(self) -> Completion:
        """The one retry after an overflow; a second overflow is a clear error."""
        try:
            return self._send()
        except ContextOverflowError as again:
            self._overflowed(again)
            raise CompactionError(f"turn {self.turn}: {still_over_window(again)}") from again

    def _check_truncation(self, completion: Completion) -> None:
        """A prompt the server silently shortened: adopt its size and compact (the reply stays:
        the server answered the newest messages, which truncation keeps). A gap from a server
        not known to report whole prompts is a report passed over instead (`UsageTrust`)."""
        count = self.counter.count(self._sent)
        if self.usage_trust.truncation(completion.usage, count) is None:
            return
        found = truncated_prompt(completion.usage, count.total)
        if found is not None:
            found = self._truncation_window(found, count.total)
            self._silent_overflow(found, completion.usage.input_tokens, "truncated")
            self._compact("context_overflow")

    def _truncation_window(self, found: SilentOverflow, counted: int) -> SilentOverflow:
        """The window a silent truncation shows: the server's own when it can be asked, else the
        one behind Ollama's half-window cut, else the reported size (``found``: never more than
        the real window, but maybe half of it)."""
        reported = found.limit
        served = served_overflow(reported, counted, self.provider.served_window())
        if served is not None:
            return served
        sent = self._sent
        kept = (
            self.counter.count(sent.with_messages(sent.messages[dropped:])).total
            for dropped in range(1, len(sent.messages))
        )
        half = half_window(reported, counted, kept)
        # Not smaller than the window in force: a guess already adopted and still truncated,
        # so the guess was too large (see half_window); the reported size is sure.
        return half if half is not None and half.limit < self.window else found

    def _undercount(self, exc: ContextOverflowError) -> float:
        """Our count over the server's, when the server said how long the prompt was (< 1)."""
        return undercount_scale(self.counter.count(self.request()).total, exc.prompt_tokens)

    def _overflowed(self, exc: ContextOverflowError) -> None:
        self._count_overflow(
            limit=exc.limit, prompt_tokens=exc.prompt_tokens, message=one_line(str(exc))
        )
        if exc.limit is not None:
            self._adopt_window(exc.limit, "the server stated its real context length")

    def _silent_overflow(self, found: SilentOverflow, prompt_tokens: int, silent: str) -> None:
        self._count_overflow(
            limit=found.limit, prompt_tokens=prompt_tokens, message=found.reason, silent=silent
        )
        self._adopt_window(found.limit, found.reason)

    def _count_overflow(self, **data: Any) -> None:
        self.overflows += 1
        if self.archive is not None:
            self.archive.append_meta({"overflows": self.overflows})
        self._emit("overflow", **data)

    def _adopt_window(self, limit: int, reason: str) -> None:
        adopted = adopt_window(
            limit, self.window, self._policy_spec, self._max_output_setting, self.archive
        )
        if adopted is None:
            return
        old = self.window
        self.window, self.policy = adopted
        self._emit("window_changed", old=old, window=self.window, reason=reason)
        self.check_floor()

    def _record(self, completion: Completion) -> Message:
        usage = dataclasses.replace(
            completion.usage,
            compaction_id=self.compaction_id,
            timestamp=completion.usage.timestamp or time.time(),
        )
        reply = dataclasses.replace(completion.message, usage=usage)
        self.max_request_tokens = max(self.max_request_tokens, usage.input_tokens)
        # The prompt as the rule counted it (the view is still the request sent), so the next
        # check measures the step's growth on the same count it compares with the line.
        self.learned = self.learned.after_call(self.context_tokens(), usage.output_tokens)
        self._add(reply)
        if self.archive is not None:
            self.archive.append_usage(usage, len(self.history) - 1)
        self._emit("usage", input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        return reply

    # -- compaction ------------------------------------------------------------------------

    def _maybe_compact(self, *checkpoints: Checkpoint) -> None:
        if not any(c in self.policy.checked for c in checkpoints):
            return
        tokens = self.context_tokens()
        seen = self.learned.seeing(tokens)  # the step that led here is already seen
        if not self.policy.fires_in_session(
            tokens,
            self.window,
            largest_reply=seen.largest_reply,
            largest_growth=seen.largest_growth,
        ):
            return
        if self._turn_compactions >= self.max_compactions_per_turn:
            self._emit("capped", tokens=tokens, cap=self.max_compactions_per_turn)
            return
        self._compact("context_pressure")

    def _compact(self, trigger: Trigger, *, scale: float = 1.0) -> CompactionResult:
        """Compact the view; ``scale`` < 1 lowers the line when our counter proved low."""
        # The cap binds pressure compactions (`_maybe_compact`); an overflow compaction is
        # already bounded (once per request, then a clear error) and is the only way forward.
        self._turn_compactions += 1
        result, record = compact_under_line(
            self.request(),
            self.counter,
            policy=self.policy,
            window=self.window,
            max_output=self.max_output_tokens,
            strategy=self.strategy,
            summarizer=self.summarizer,
            number=len(self.compactions) + 1,
            trigger=trigger,
            turn=self.turn,
            scale=scale,
        )
        self.messages = result.messages
        self.compaction_id = result.compaction_id
        self.learned = self.learned.after_compaction()  # its drop is not a step of the session
        self.compactions.append(record)
        if self.archive is not None:
            self.archive.append_compaction(result, trigger=trigger, extra={"turn": self.turn})
            # One key per compaction, so a resumed session still lists them all.
            self.archive.append_meta({f"compaction.{len(self.compactions)}": record.to_json()})
        self._emit("compaction", **record.to_json())
        return result

    def restore(self, state: ArchiveState) -> None:
        """Continue the session ``state`` records (from ``Archive(path).resumed``)."""
        self.messages = tuple(state.view)
        self.history = list(state.history)
        self.compaction_id = state.compaction_id
        self.turn = sum(1 for m in state.history if m.role == "user" and not m.is_summary)
        meta = state.meta
        window = meta.get("window")
        if isinstance(window, int) and not isinstance(window, bool) and window > 0:
            self.window = window
            self.policy = policy_for(self._policy_spec, window, self.max_output_tokens)
        overflows = meta.get("overflows")
        self.overflows = overflows if isinstance(overflows, int) else 0
        self.compactions = restored_compactions(meta)
        self.max_request_tokens = max((u.input_tokens for _, u in state.usage), default=0)
        self.learned = _learned_from(u for _, u in state.usage)

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
