"""Framework items <-> our messages: which item each message came from, and the way back.

Each adapter translates its items one by one; a compacted view maps back to the original item
wherever its messages are unchanged, so ids, metadata and provider fields survive compaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Generic, TypeVar

from ctxbudget.compaction.handoff import SUMMARY_HEADER
from ctxbudget.integrations._guard import ADAPTER_META_PREFIX
from ctxbudget.messages.model import Message, join_system
from ctxbudget.messages.usage import Usage

__all__ = [
    "SOURCE_KEY",
    "Resume",
    "Substitution",
    "Translated",
    "UsageMemory",
    "stamp",
    "translate",
]

Item = TypeVar("Item")
SOURCE_KEY = f"{ADAPTER_META_PREFIX}source"
"""``Message.meta`` key: the index of the framework item a message was translated from."""


@dataclass(frozen=True, slots=True)
class Translated(Generic[Item]):
    """A framework list as our messages; ``per_item[i]`` are the messages of ``items[i]``."""

    items: tuple[Item, ...]
    system: str | None
    """The leading system messages joined; None when there is none (an empty one is ``""``)."""
    messages: tuple[Message, ...]
    per_item: tuple[tuple[Message, ...], ...]
    lead: int = 0
    """How many leading items were system messages (now ``system``)."""

    def back(
        self, messages: Sequence[Message], rebuild: Callable[[Item | None, list[Message]], Item]
    ) -> list[Item]:
        """``messages`` as framework items: originals where unchanged, else ``rebuild(original,
        messages)`` (``original`` None for a message of ours, such as the summary)."""
        out: list[Item] = []
        for index, group in _groups(messages):
            if index is not None:
                out.extend(self._silent_before(index))
            if index is not None and _same(group, self.per_item[index]):
                out.append(self.items[index])
            else:
                out.append(rebuild(None if index is None else self.items[index], group))
        return out

    def back_whole(
        self, messages: Sequence[Message], rebuild: Callable[[Item | None, list[Message]], Item]
    ) -> list[Item]:
        """`back`, after the leading system items: a whole list for the framework's state."""
        return [*self.items[: self.lead], *self.back(messages, rebuild)]

    def resume(self) -> Resume:
        """What this translation made of its items, for a later `translate` of a list that
        starts with them."""
        return Resume(self.per_item, self.system, self.lead)

    def _silent_before(self, index: int) -> list[Item]:
        """The items with no messages (reasoning, say) just before ``items[index]``: they go
        where it goes, as a reasoning item goes with the call it preceded."""
        start = index
        while start > self.lead and not self.per_item[start - 1]:
            start -= 1
        return list(self.items[start:index])


@dataclass(frozen=True, slots=True)
class Resume:
    """What `translate` made of a list's leading items, to go on from (`Translated.resume`):
    their messages, the system prompt they held and how many were system items."""

    per_item: tuple[tuple[Message, ...], ...]
    system: str | None
    lead: int

    def begun(self) -> bool:
        """The conversation proper had begun within these items (`translate`'s ``started``
        with system items leading): they hold a message that is not our summary (the system
        messages they became the prompt of are not in ``per_item``). Only then can
        `translate` go on from them."""
        return any(not m.is_summary for group in self.per_item for m in group)


def translate(
    items: Sequence[Item],
    one: Callable[[Item], Sequence[Message]],
    *,
    lead_system: bool = True,
    resume: Resume | None = None,
) -> Translated[Item]:
    """Translate ``items`` with ``one``.

    System messages before the conversation proper (before any message that is neither a
    system message nor our summary) become the system prompt, wherever their items put them:
    pydantic-ai keeps the system prompt in the first request, next to the user's task.

    A message ``one`` returns already stamped with its item's index (`stamp`) is kept as the
    very object it is: a caller that remembers its reads (the gateway's item memo) then gets
    the same `Message` objects for an unchanged item request after request, and comparisons
    of a resent list stop at identity instead of comparing every field.

    ``resume``: the caller knows ``items`` start with ``len(resume.per_item)`` items that read
    as those of an earlier call (equal items at the same places: the gateway compares their
    JSON), which `Translated.resume` returned; they are taken as they were, and ``one`` is
    called for the items after them only. Taken only where the conversation proper had begun
    within them (after that, an item's messages depend on the item and its index alone);
    else every item is read.
    """
    per_item: list[tuple[Message, ...]] = []
    system: list[str | None] = []
    lead = 0
    started = not lead_system
    first = 0
    if resume is not None and (started or resume.begun()):
        per_item, lead, started = list(resume.per_item), resume.lead, True
        system = [resume.system] if resume.system is not None else []
        first = len(per_item)
    for i, item in enumerate(items[first:], first):
        got = stamp(one(item), i)
        if started:
            # Past the system prompt every message is kept, as it is unless `_demote` changes
            # it (most do not: the tuple ``got`` itself is then kept, no copy).
            if any(map(_demotes, got)):
                got = tuple(map(_demote, got))
            per_item.append(got)
            continue
        kept = []
        for m in got:
            if m.role == "system" and not started:
                system.append(m.text)
                continue
            m = _demote(m)
            started = started or not m.is_summary
            kept.append(m)
        per_item.append(tuple(kept))
        if got and not kept and lead == i:
            lead = i + 1
    messages = tuple(chain.from_iterable(per_item))
    return Translated(tuple(items), join_system(system), messages, tuple(per_item), lead)


def stamp(messages: Sequence[Message], index: int) -> tuple[Message, ...]:
    """``messages`` marked as translated from item ``index`` (``meta[SOURCE_KEY]``); a message
    marked so already is returned as it is (the same object), not copied."""
    for m in messages:
        mark = m.meta.get(SOURCE_KEY)
        if type(mark) is not int or mark != index:
            break
    else:  # all marked already (a remembered read): the very same messages
        return messages if isinstance(messages, tuple) else tuple(messages)
    return tuple(
        m
        if type(m.meta.get(SOURCE_KEY)) is int and m.meta[SOURCE_KEY] == index
        else dataclasses.replace(m, meta={**m.meta, SOURCE_KEY: index})
        for m in messages
    )


def _same(a: Sequence[Message], b: Sequence[Message]) -> bool:
    """Equal but for usage, which the adapters attach to the messages they count."""
    return len(a) == len(b) and all(
        x == y or dataclasses.replace(x, usage=None) == dataclasses.replace(y, usage=None)
        for x, y in zip(a, b, strict=True)
    )


def _demotes(m: Message) -> bool:
    """`_demote` would change ``m``."""
    return m.role == "system" or (m.role == "user" and m.text.startswith(SUMMARY_HEADER))


def _demote(m: Message) -> Message:
    # Our summary, handed back to the framework as plain text, is a summary again when it returns:
    # compaction must update it, not pin it as the user's task.
    if m.role == "user" and m.text.startswith(SUMMARY_HEADER):
        return dataclasses.replace(m, meta={**m.meta, "summary": True})
    # A system message in mid conversation stays in place as a user message (as the OpenAI
    # reader does), remembering its role.
    if m.role != "system":
        return m
    return dataclasses.replace(m, role="user", meta={**m.meta, "openai_role": "system"})


def _groups(messages: Sequence[Message]) -> list[tuple[int | None, list[Message]]]:
    groups: list[tuple[int | None, list[Message]]] = []
    for m in messages:
        index = m.meta.get(SOURCE_KEY)
        index = index if isinstance(index, int) else None
        if groups and index is not None and groups[-1][0] == index:
            groups[-1][1].append(m)
        else:
            groups.append((index, [m]))
    return groups


@dataclass(slots=True)
class Substitution(Generic[Item]):
    """For harnesses that resend their whole list each call: a prefix of it was compacted.

    ``replaced`` is that prefix as our messages, ``view`` the framework items standing for it.
    """

    replaced: tuple[Message, ...] = ()
    view: tuple[Any, ...] = ()

    def apply(self, translated: Translated[Item]) -> list[Item]:
        """The list to send: the compacted view in place of the prefix it replaced."""
        n = len(self.replaced)
        if n and translated.messages[:n] == self.replaced:
            rest = _items_after(translated, n)
            return [*translated.items[: translated.lead], *self.view, *rest]
        return list(translated.items)

    def update(self, full: Translated[Item], view: Sequence[Item]) -> None:
        """Remember that the whole of ``full`` (as the caller holds it) is now ``view``."""
        self.replaced = full.messages
        self.view = tuple(view)


def _items_after(translated: Translated[Item], n: int) -> list[Item]:
    """The items holding messages ``n`` onwards (n always falls between two items)."""
    count = 0
    for i, group in enumerate(translated.per_item):
        if count >= n and group:
            return list(translated.items[i:])
        count += len(group)
    return []


@dataclass(slots=True)
class UsageMemory:
    """For harnesses whose lists carry no usage: the last list sent and the usage of its reply.

    The reply is the assistant message right after the sent list, so `attach` puts the usage
    there, where ``context_tokens`` takes it as the base of the next count.
    """

    sent: tuple[Message, ...] = ()
    usage: Usage | None = None

    def attach(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        """``messages`` with the last usage on the reply to the last list sent, if present."""
        n = len(self.sent)
        usage = self.usage
        if usage is None or len(messages) <= n or messages[:n] != self.sent:
            return messages
        if messages[n].role != "assistant":
            return messages
        return (*messages[:n], dataclasses.replace(messages[n], usage=usage), *messages[n + 1 :])
