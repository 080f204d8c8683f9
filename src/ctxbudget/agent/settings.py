"""The loop's budget settings for a window: the rule, the reserve, and the line compaction aims
under. Pure functions of the window and the request's max output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxbudget.agent.events import CompactionRecord
from ctxbudget.budget.rules import (
    DEFAULT_COMPACTION_RESERVE,
    DEFAULT_REPLY_RESERVE,
    CtxbudgetPolicy,
    Policy,
    get_policy,
)

__all__ = [
    "compaction_line",
    "compaction_reserve",
    "effective_max_output",
    "policy_for",
    "reply_reserve",
    "restored_compactions",
]

# The compaction reserve holds the summarizer's instructions next to the history it reads.
# In a small window the history is small too, and the summarizer's request drops the agent's
# tools (the larger half of the floor), so the reserve scales down: 1/16 of the window, which
# reaches the 2,048 default at 32K.
COMPACTION_RESERVE_SHARE = 16


def compaction_reserve(window: int) -> int:
    """The compaction reserve for ``window``: 2,048, or 1/16 of a window below 32K."""
    return min(DEFAULT_COMPACTION_RESERVE, window // COMPACTION_RESERVE_SHARE)


# Without a configured reply limit the loop asks for at most a quarter of the window (4,096 at
# 16K and up, letta-code's and the seed's reply limit): a fixed 4,096 would leave a 4,096-token
# window (Ollama's old default, a common adopted limit) no room for any prompt at all.
REPLY_SHARE = 4


def effective_max_output(window: int, configured: int | None) -> int:
    """The reply limit to ask for: ``configured``, else min(4,096, a quarter of the window)."""
    if configured is not None:
        return configured
    return max(1, min(DEFAULT_REPLY_RESERVE, window // REPLY_SHARE))


def policy_for(spec: str | Policy, window: int, max_output: int | None) -> Policy:
    """The rule for ``window``: a `Policy` as given, or a preset by name.

    The ``ctxbudget`` preset takes the request's max output as its reply reserve and the
    window's compaction reserve; other presets keep their harness's own numbers.
    """
    if isinstance(spec, Policy):
        return spec
    if spec == "ctxbudget":
        return get_policy(
            "ctxbudget", max_output=max_output, compaction_reserve=compaction_reserve(window)
        )
    return get_policy(spec)


def reply_reserve(policy: Policy, max_output: int | None) -> int:
    """What the prompt floor must leave free: the rule's reserves, or the reply's max output."""
    if isinstance(policy, CtxbudgetPolicy):
        return policy.reserve_tokens
    return DEFAULT_REPLY_RESERVE if max_output is None else max_output


def compaction_line(policy: Policy, window: int, floor: int, max_output: int | None) -> int:
    """The threshold compaction measures its target against.

    The rule's own line, unless it is at or under the floor (Pi's and OpenCode's fixed reserves
    in a small window): then the window less the reply's max output, the most a request may be.
    """
    ceiling = window - (DEFAULT_REPLY_RESERVE if max_output is None else max_output)
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
