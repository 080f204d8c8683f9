"""Policy replay: where each trigger rule fires on a recorded token curve, and where the wall is.

The model: before call ``i`` the rule sees ``context_tokens[i]``, what a usage-first count of that
request gives (exact in a replay). ``before_request`` and ``after_step`` rules are checked at
every call; ``task_end`` rules only at calls that follow a real user message. The wall is the
first call whose context + output exceeds the window; a rule is late when it first fires after
the wall, or never fires while the wall is hit. The same is asked per segment (the calls between
two compactions the harness recorded), so each rule is judged on the same work as the harness.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ctxbudget.budget.rules import Policy, SessionEvidence
from ctxbudget.replay.trace import Call, CallTable, Trace, as_table


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
    fires: tuple[int | None, ...] = ()
    """Per segment (calls between recorded compactions): the call where the rule first fires."""
    late_segments: int = 0
    """Segments that hit the wall before the rule fired there, or without it firing."""
    mean_fill_at_fire: float | None = None
    """Mean share of the window the context used at the fire calls (None: never fires)."""

    @property
    def segments(self) -> int:
        """How many segments the rule was replayed on."""
        return len(self.fires)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowReplay:
    """Every rule on one window."""

    window: int
    wall: int | None
    policies: tuple[PolicyReplay, ...]
    walls: tuple[int | None, ...] = ()
    """Per segment: the first call whose context + output exceeds the window."""
    by_model: dict[str, int] | None = None
    """The window of each call's model, when the window follows the model (``window`` is then
    the window of calls whose model has none)."""


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


def segment_starts(calls: Sequence[Call]) -> list[int]:
    """Where each segment begins: the first call, and each call after a recorded compaction."""
    t = as_table(calls)
    return [0] + [i for i in range(1, len(t)) if t.after_compaction[i]] if len(t) else []


def recorded_compactions(calls: Sequence[Call]) -> list[int]:
    """The calls the harness compacted before (its own decisions, as the trace records them)."""
    t = as_table(calls)
    return [t.call_index[i] for i in range(len(t)) if t.after_compaction[i]]


def _bounds(starts: Sequence[int], n: int) -> list[tuple[int, int]]:
    return list(zip(starts, [*starts[1:], n], strict=True))


def call_windows(
    calls: Sequence[Call], window: int, by_model: Mapping[str, int] | None = None
) -> array[int]:
    """Per call, its window: its model's in ``by_model``, else ``window``."""
    t = as_table(calls)
    if not by_model:
        return array("q", [window]) * len(t)
    return array("q", (by_model.get(t.model_at(i) or "", window) for i in range(len(t))))


def find_wall(calls: Sequence[Call], window: int) -> int | None:
    """The first call whose context + output exceeds the window."""
    t = as_table(calls)
    walls = segment_walls(t, call_windows(t, window), [0] if len(t) else [])
    return walls[0] if walls else None


def segment_walls(t: CallTable, sizes: Sequence[int], starts: Sequence[int]) -> list[int | None]:
    """Per segment, its first call whose context + output exceeds that call's window."""
    walls: list[int | None] = []
    for lo, hi in _bounds(starts, len(t)):
        wall = next((i for i in range(lo, hi) if t.context[i] + t.output[i] > sizes[i]), None)
        walls.append(None if wall is None else t.call_index[wall])
    return walls


def learned_before(t: CallTable) -> tuple[array[int], array[int]]:
    """Per call, what the session has shown the rule at its check (`SessionEvidence`, as the
    agent loop learns it): the largest reply of the earlier calls, and the largest growth
    between consecutive calls up to this one (the jump into this call included: it is counted
    before the check). Growth is not measured across a recorded compaction."""
    replies, growths = array("q"), array("q")
    seen = SessionEvidence()
    for i in range(len(t)):
        if t.after_compaction[i]:
            seen = seen.after_compaction()
        at_check = seen.seeing(t.context[i])
        replies.append(at_check.largest_reply)
        growths.append(at_check.largest_growth)
        seen = seen.after_call(t.context[i], t.output[i])
    return replies, growths


def segment_fires(
    policy: Policy,
    t: CallTable,
    sizes: Sequence[int],
    extra: Sequence[int],
    starts: Sequence[int],
    learned: tuple[Sequence[int], Sequence[int]] | None = None,
) -> list[int | None]:
    """Per segment, the first call at which ``policy`` fires on context + ``extra`` tokens,
    honouring when it is checked and what the session has shown it so far (``learned``:
    `learned_before`, when already computed)."""
    replies, growths = learned_before(t) if learned is None else learned
    fires: list[int | None] = []
    for lo, hi in _bounds(starts, len(t)):
        fire = None
        for i in range(lo, hi):
            if _checked(policy, t.task_start[i]) and policy.fires_in_session(
                t.context[i] + extra[i],
                sizes[i],
                largest_reply=replies[i],
                largest_growth=growths[i],
                max_output=t.max_tokens[i] or None,
            ):
                fire = t.call_index[i]
                break
        fires.append(fire)
    return fires


def session_lines(policy: Policy, t: CallTable, sizes: Sequence[int]) -> list[int]:
    """Per call, the rule's line as the session has taught it (the ``ctxbudget`` rule's falls
    as the largest reply and the largest step so far grow; the others' stay put)."""
    replies, growths = learned_before(t)
    return [
        policy.threshold_in_session(
            sizes[i],
            largest_reply=replies[i],
            largest_growth=growths[i],
            max_output=t.max_tokens[i] or None,
        )
        for i in range(len(t))
    ]


def is_late(trigger: int | None, wall: int | None) -> bool:
    """Late: fires after the wall, or never while the wall is hit."""
    if wall is None:
        return False
    return trigger is None or trigger > wall


def fill(context: int, window: int) -> float:
    """The share of the window a context uses; one already over it (a segment that starts past
    the window, when the harness's compaction took effect calls later) fills it, no more."""
    return min(1.0, context / window)


def _mean_fill(t: CallTable, sizes: Sequence[int], fires: Sequence[int | None]) -> float | None:
    at = [f for f in fires if f is not None]
    if not at:
        return None
    position = {index: i for i, index in enumerate(t.call_index)}
    return sum(fill(t.context[position[f]], sizes[position[f]]) for f in at) / len(at)


def replay_window(
    trace: Trace,
    window: int,
    policies: Sequence[Policy],
    unresent: Sequence[int] | None = None,
    *,
    by_model: Mapping[str, int] | None = None,
) -> WindowReplay:
    """Every policy on one window (``unresent``: `unresent_reasoning`, when already computed;
    ``by_model``: windows that follow each call's model)."""
    calls = as_table(trace.calls)
    sizes = call_windows(calls, window, by_model)
    starts = segment_starts(calls)
    walls = segment_walls(calls, sizes, starts)
    wall = next((w for w in walls if w is not None), None)
    none = array("q", bytes(8 * len(calls)))
    unresent = unresent_reasoning(trace) if unresent is None else unresent
    learned = learned_before(calls)
    results = []
    for policy in policies:
        fires = segment_fires(policy, calls, sizes, none, starts, learned)
        trigger = next((f for f in fires if f is not None), None)
        on_total = segment_fires(policy, calls, sizes, unresent, starts, learned)
        results.append(
            PolicyReplay(
                name=policy.name,
                checked=tuple(policy.checked),
                threshold=policy.threshold(window),
                tiers=policy.tiers(window),
                first_trigger=trigger,
                late=is_late(trigger, wall),
                first_trigger_reading_total=next((f for f in on_total if f is not None), None),
                parameters=policy.parameters(),
                fires=tuple(fires),
                late_segments=sum(is_late(f, w) for f, w in zip(fires, walls, strict=True)),
                mean_fill_at_fire=_mean_fill(calls, sizes, fires),
            )
        )
    return WindowReplay(
        window=window,
        wall=wall,
        policies=tuple(results),
        walls=tuple(walls),
        by_model=dict(by_model) if by_model else None,
    )


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
