"""Chat request values: messages, content parts, tool calls, tool specs and the request."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from ctxbudget.messages.jsondepth import JsonTooDeep, check_depth, load_json
from ctxbudget.messages.usage import Usage

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class TextPart:
    """A piece of text inside a message's content."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagePart:
    """An image inside a message's content; its size decides what it costs."""

    url: str | None = None
    """A URL or data: URL, as the request carried it (kept for round trips)."""
    width: int | None = None
    """Pixel width, when known; an unknown size is charged a fixed estimate."""
    height: int | None = None
    """Pixel height, when known."""
    detail: Literal["auto", "low", "high"] | None = None
    """OpenAI's detail setting; "low" is a flat 85 tokens there."""
    media_type: str | None = None
    """For Anthropic base64 images, e.g. ``image/png``."""
    kind: Literal["image"] = "image"


ContentPart = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class ToolCall:
    """An assistant's call of a tool; ``arguments`` is the JSON text as the model wrote it."""

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> Any:
        """The arguments as a JSON value; text that is not JSON (or nests deeper than
        ``MAX_JSON_DEPTH``) is returned as the string."""
        try:
            return load_json(self.arguments)
        except ValueError:
            return self.arguments

    def argument_problem(self) -> str | None:
        """Why the arguments cannot be passed to a tool (not JSON, too deep), or None.

        Blank arguments are no problem: some servers send "" for a call without arguments.
        """
        if not self.arguments.strip():
            return None
        try:
            load_json(self.arguments)
        except JsonTooDeep as exc:
            return f"the arguments of {self.name!r} are {exc}"
        except ValueError:
            return f"the arguments of {self.name!r} are not valid JSON; send a JSON object"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One chat message.

    ``usage`` is set on assistant messages that a provider produced: what the server reported
    for the request that produced this reply. ``tool_call_id`` links a ``tool`` message to the
    assistant's call it answers.
    """

    role: Role
    content: str | tuple[ContentPart, ...] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    """Assistant only: the tools it called, in order."""
    tool_call_id: str | None = None
    """Tool only: the id of the call this message answers."""
    name: str | None = None
    """Optional participant name (OpenAI ``name``), or the tool's name on a tool message."""
    reasoning: str | None = None
    """Assistant only: reasoning / thinking text (``reasoning_content``, thinking blocks)."""
    usage: Usage | None = None
    """Assistant only: the provider's usage report for the request that produced this reply."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form annotations (archive ids, compaction markers); never sent to a model."""

    @property
    def text(self) -> str:
        """The message's text, its text parts joined; images contribute nothing."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """The image parts of the content, in order."""
        if isinstance(self.content, str):
            return ()
        return tuple(p for p in self.content if isinstance(p, ImagePart))

    @property
    def is_summary(self) -> bool:
        """True for the summary message a compaction inserted."""
        return bool(self.meta.get("summary"))


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    def __post_init__(self) -> None:
        # Schemas are walked recursively (counting, templates): too deep is refused here.
        check_depth(self.parameters, f"tool {self.name!r} parameters")


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Everything a model is sent in one call.

    ``system`` is kept apart from ``messages`` (as Anthropic does); ``messages`` never holds a
    system message. ``max_output_tokens`` is the reply limit asked for, when set.
    """

    system: str | None = None
    """The system prompt: None when the request has none, ``""`` for an empty system message.
    They differ: a template renders an empty system turn (its framing costs tokens) where it
    renders nothing, or its own default prompt (Qwen2.5), for none."""
    tools: tuple[ToolSpec, ...] = ()
    messages: tuple[Message, ...] = ()
    max_output_tokens: int | None = None
    model: str | None = None
    _extends: tuple[Message, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    """The messages this request was made from by ``append``: its messages start with them."""

    def with_messages(self, messages: tuple[Message, ...]) -> Request:
        """The same request with other messages."""
        return Request(
            system=self.system,
            tools=self.tools,
            messages=messages,
            max_output_tokens=self.max_output_tokens,
            model=self.model,
        )

    def append(self, *messages: Message) -> Request:
        """The same request with ``messages`` added at the end.

        The result knows what it extends, so an incremental counter that counted this request
        skips comparing the history message by message (a cost that grows with it).
        """
        request = self.with_messages((*self.messages, *messages))
        object.__setattr__(request, "_extends", self.messages)
        return request


def join_system(parts: Iterable[str | None]) -> str | None:
    """One system prompt from several (leading system messages, a framework's instructions and
    its system messages): None when every part is None; else the texts joined by a blank line,
    an empty part present but adding no blank line."""
    given = [p for p in parts if p is not None]
    if not given:
        return None
    return "\n\n".join(p for p in given if p)


class Change(NamedTuple):
    """What differs between the request a counter counted last and the next one (a named
    tuple: every step makes one, and a tuple is made at a third of a dataclass's cost)."""

    kept: int
    """How many leading messages the two share (by identity or value)."""
    appended: bool
    """True when the next request keeps every message of the last one (and may add some)."""
    same_head: bool
    """True when the system prompt and the tools render as they did."""
    same: bool
    """True when the whole request renders as it did (the same messages tuple, the same head):
    a loop often counts one request several times (before sending it, at sending)."""


NOTHING_KEPT = Change(kept=0, appended=False, same_head=False, same=False)
"""The change to a request from a counter that has counted nothing (or failed midway)."""


def what_changed(before: Request | None, after: Request) -> Change:
    """What ``after`` keeps of ``before``, the request counted last: the one place a counter
    learns what to count again. A request made by ``Request.append`` from ``before``'s
    messages is known to keep them all without comparing them."""
    if before is None:
        return NOTHING_KEPT
    old, new = before.messages, after.messages
    tools = before.tools
    same_head = before is after or (
        before.system == after.system and (tools is after.tools or alike(tools, after.tools))
    )
    known = old is new or after._extends is old
    kept = len(old) if known else common_prefix(old, new)
    # tuple.__new__, not Change(...): a named tuple's own __new__ is a Python function, and
    # every step of an agent loop makes one Change.
    return _new_change(Change, (kept, kept == len(old), same_head, same_head and old is new))


_new_change = tuple.__new__


def extends(request: Request, messages: tuple[Message, ...]) -> bool:
    """True when ``request.messages`` is known to start with ``messages`` without comparing
    them: ``request`` was made by ``append`` from a request holding that very tuple."""
    return request._extends is messages


def same(a: object, b: object) -> bool:
    """The same object, or an equal one: identity first, cheap. Equal messages render the same
    (their fields are text); values parsed from JSON may not (``alike``)."""
    return a is b or bool(a == b)


_PRINTED_AS_EQUAL = (str, int, bool, type(None))  # of one type, equal values print alike


def alike(a: object, b: object) -> bool:
    """The same object, or one that renders the same: of the same type, equal, and printed
    alike where equal values may print apart (``True == 1 == 1.0``, ``-0.0 == 0.0``, a dict's
    keys in another order: a tool schema, tool-call arguments parsed from JSON, values a
    template sets), as a template prints them."""
    if a is b:
        return True
    return (
        type(a) is type(b) and bool(a == b) and (type(a) in _PRINTED_AS_EQUAL or repr(a) == repr(b))
    )


def common_prefix(old: tuple[Message, ...], new: tuple[Message, ...]) -> int:
    """How many leading messages ``old`` and ``new`` share (by identity or value): what a
    request counted before and the next one have in common."""
    n = len(old)
    if _starts_with(new, old):
        return n
    # The longest equal prefix by prefix compares, each done in C (identity first, as
    # ``same``): a Python loop over thousands of messages costs more than the step after it.
    # Equal prefixes are the shorter ones, so a search finds the cut; an edit is most often
    # near the end, where galloping back from it looks first.
    limit = min(n, len(new))
    good, bad, back = 0, limit + 1, 1  # old[:good] == new[:good], [:bad] differ
    if limit and not same(old[limit - 1], new[limit - 1]):
        bad = limit  # the last one differs (an edit of it): one compare of the rest, not two
    while bad - back > good:
        at = bad - back
        if old[:at] == new[:at]:
            good = at
            break
        bad, back = at, back * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if old[:mid] == new[:mid]:
            good = mid
        else:
            bad = mid
    return good


def _starts_with(new: tuple[Message, ...], old: tuple[Message, ...]) -> bool:
    """``new[:len(old)] == old`` without building the slice, whose refcount updates touch every
    message (the cost of a step at thousands of messages). Tuples compare item by item (by
    identity, then value) and, past the shorter one, by length; at a differing pair ``<=`` asks
    two messages to order themselves, which they refuse."""
    try:
        return len(old) <= len(new) and old <= new
    except TypeError:
        return False
