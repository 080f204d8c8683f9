"""Policy replay: where each trigger rule fires on a recorded token curve, and where the wall is.

The model: before call ``i`` the rule sees ``context_tokens[i]``, what a usage-first count of that
request gives (exact in a replay). ``before_request`` and ``after_step`` rules are checked at
every call; ``task_end`` rules only at calls that follow a real user message. The wall is the
first call whose context + output exceeds the window; a rule is late when it first fires after
the wall, or never fires while the wall is hit.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxbudget.budget.rules import Policy
from ctxbudget.replay.trace import Call, Trace, as_table


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyReplay:
    """One rule on one window."""

    name: str
    checked: tuple[str, ...]
    threshold: int
    tiers: tuple[int, ...] | None
    first_trigger: int | None
    """The call before which the rule would compact (None: never)."""
    late: bool
    first_trigger_reading_total: int | None
    """Where it would fire if it read the last reported total, reasoning the harness did not
    send back included (the reasoning pitfall)."""
    parameters: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowReplay:
    """Every rule on one window."""

    window: int
    wall: int | None
    policies: tuple[PolicyReplay, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PitfallCall:
    """A call whose previous reported total counted reasoning that was not sent back."""

    index: int
    reported_total: int
    """context + output of the previous call, as the provider reported it."""
    next_context: int
    """What this call really sent."""
    unresent_reasoning: int


def unresent_reasoning(trace: Trace) -> array[int]:
    """Per call ``i``: reasoning tokens in the total reported before call ``i`` that call ``i``
    did not resend.

    "dropped": the previous reply's reasoning. "dropped_between_tasks" (Codex, Responses API):
    reasoning stays within a task and all of the previous task's is dropped at a new user turn.
    """
    t = as_table(trace.calls)
    out = array("q", bytes(8 * len(t)))
    if trace.reasoning == "dropped":
        out[1:] = t.reasoning[:-1]
    elif trace.reasoning == "dropped_between_tasks":
        since_task = 0  # reasoning from the latest task start (included) to the previous call
        for i, reasoning in enumerate(t.reasoning):
            if t.task_start[i]:
                out[i], since_task = since_task, 0
            since_task += reasoning
    return out


def checks_at(policy: Policy, call: Call) -> bool:
    """True when the rule's harness checks before this call."""
    return _checked(policy, call.task_start)


def _checked(policy: Policy, task_start: int) -> bool:
    if "before_request" in policy.checked or "after_step" in policy.checked:
        return True
    return "task_end" in policy.checked and bool(task_start)


def find_wall(calls: Sequence[Call], window: int) -> int | None:
    """The first call whose context + output exceeds the window."""
    t = as_table(calls)
    for i, (context, output) in enumerate(zip(t.context, t.output, strict=True)):
        if context + output > window:
            return t.call_index[i]
    return None


def first_trigger(
    policy: Policy, calls: Sequence[Call], window: int, extra: Sequence[int]
) -> int | None:
    """The first call at which ``policy`` fires on context + ``extra`` tokens."""
    t = as_table(calls)
    for i, (context, more) in enumerate(zip(t.context, extra, strict=True)):
        if _checked(policy, t.task_start[i]) and policy.fires(context + more, window):
            return t.call_index[i]
    return None


def is_late(trigger: int | None, wall: int | None) -> bool:
    """Late: fires after the wall, or never while the wall is hit."""
    if wall is None:
        return False
    return trigger is None or trigger > wall


def replay_window(
    trace: Trace, window: int, policies: Sequence[Policy], unresent: Sequence[int] | None = None
) -> WindowReplay:
    """Every policy on one window (``unresent``: `unresent_reasoning`, when already computed)."""
    calls = as_table(trace.calls)
    wall = find_wall(calls, window)
    none = array("q", bytes(8 * len(calls)))
    unresent = unresent_reasoning(trace) if unresent is None else unresent
    results = []
    for policy in policies:
        trigger = first_trigger(policy, calls, window, none)
        results.append(
            PolicyReplay(
                name=policy.name,
                checked=tuple(policy.checked),
                threshold=policy.threshold(window),
                tiers=policy.tiers(window),
                first_trigger=trigger,
                late=is_late(trigger, wall),
                first_trigger_reading_total=first_trigger(policy, calls, window, unresent),
                parameters=policy.parameters(),
            )
        )
    return WindowReplay(window=window, wall=wall, policies=tuple(results))


def reasoning_pitfall(trace: Trace) -> tuple[PitfallCall, ...]:
    """Calls where the previous reported total overstates the next request by its reasoning."""
    t = as_table(trace.calls)
    found = []
    for i, unresent in enumerate(unresent_reasoning(trace)):
        if unresent > 0:
            found.append(
                PitfallCall(
                    index=i,
                    reported_total=t.context[i - 1] + t.output[i - 1],
                    next_context=t.context[i],
                    unresent_reasoning=unresent,
                )
            )
    return tuple(found)
