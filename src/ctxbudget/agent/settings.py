"""The loop's budget settings for a window: the rule, the reserve, and the line compaction aims
under. Pure functions of the window and the request's max output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxbudget.agent.events import CompactionRecord
from ctxbudget.budget.rules import (
    CtxbudgetPolicy,
    Policy,
    default_max_output,
    get_policy,
)

__all__ = [
    "compaction_line",
    "effective_max_output",
    "policy_for",
    "reply_reserve",
    "restored_compactions",
]


def effective_max_output(window: int, configured: int | None) -> int:
    """The reply limit to ask for: ``configured``, else the rule's default for ``window``."""
    return configured if configured is not None else default_max_output(window)


def policy_for(spec: str | Policy, window: int, max_output: int | None) -> Policy:
    """The rule: a `Policy` as given, or a preset by name.

    The ``ctxbudget`` preset takes the request's max output as its reply reserve (its
    compaction reserve scales with the window by itself); other presets keep their harness's
    own numbers.
    """
    if isinstance(spec, Policy):
        return spec
    if spec == "ctxbudget":
        return get_policy("ctxbudget", max_output=effective_max_output(window, max_output))
    return get_policy(spec)


def reply_reserve(policy: Policy, window: int, max_output: int | None) -> int:
    """What the prompt floor must leave free: the rule's reserves, or the reply's max output."""
    if isinstance(policy, CtxbudgetPolicy):
        return policy.reserve(window)
    return effective_max_output(window, max_output)


def compaction_line(policy: Policy, window: int, floor: int, max_output: int | None) -> int:
    """The threshold compaction measures its target against.

    The rule's own line, unless it is at or under the floor (Pi's and OpenCode's fixed reserves
    in a small window): then the window less the reply's max output, the most a request may be.
    """
    ceiling = window - effective_max_output(window, max_output)
    line = policy.threshold(window)
    if line <= floor:
        line = ceiling
    return max(min(line, ceiling), floor + 1)


def restored_compactions(meta: Mapping[str, Any]) -> list[CompactionRecord]:
    """The compactions an archive's meta lists (keys ``compaction.N``), in order."""
    found: list[tuple[int, CompactionRecord]] = []
    for key, value in meta.items():
        head, _, number = key.partition(".")
        if head != "compaction" or not number.isdigit() or not isinstance(value, Mapping):
            continue
        try:
            found.append((int(number), CompactionRecord(**value)))
        except TypeError:
            continue  # a record of another shape: not ours to list
    return [record for _, record in sorted(found, key=lambda item: item[0])]
