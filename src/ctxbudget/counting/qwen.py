"""Native renderers of the Qwen3 and Qwen2.5 chat templates, identical to Jinja2's output.

Each function mirrors one branch of ``qwen3.jinja`` / ``qwen2.5.jinja`` (Qwen/Qwen3-0.6B and
Qwen/Qwen2.5-7B-Instruct tokenizer_config.json); tests render both and compare the text.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from ctxbudget.counting.images import qwen_image_tokens
from ctxbudget.counting.scheme import NO_PIVOT, MessageCounts, MessageScheme
from ctxbudget.counting.template_input import call_arguments, message_text, tojson, tool_dict
from ctxbudget.messages.model import Message, Request, ToolCall
from ctxbudget.tokens.base import CounterKind
from ctxbudget.tokens.registry import HF_PREFIX, QWEN36_PATTERN, QWEN_PATTERN, ExactTokenizer

QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments"
    " within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
NO_THINKING = "<think>\n\n</think>\n\n"
REPLY_OPEN = "<|im_start|>assistant\n"
TURN_CLOSE = "<|im_end|>\n"

# SHA-256 of the template texts these renderers equal (tests/data/chat_templates, the real
# Qwen/Qwen2.5-7B-Instruct and Qwen/Qwen3-0.6B tokenizer_config.json): a model folder that
# carries one of them is counted natively, message by message.
NATIVE_TEMPLATES = {
    "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f": "qwen2.5",
    "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5": "qwen3",
}
# Where the native renderers cut a prompt: every cut is next to one of these, or (Qwen2.5
# tool results) at ">\n" | "<", a boundary of Qwen's pre-tokenizer pattern.
NATIVE_CUT_TOKENS = ("<|im_start|>", "<|im_end|>")
TOOL_OPEN, TOOL_CLOSE = "<tool_response>", "</tool_response>"
_NL_CUT = (QWEN_PATTERN, QWEN36_PATTERN)
"""Pre-tokenizer patterns for which a cut after a newline, before a non-space, is exact."""


def _turn(role: str, text: str) -> str:
    framing, closing = _turn_frame(role)
    return framing + text + closing


def _turn_frame(role: str) -> tuple[str, str]:
    return f"<|im_start|>{role}\n", TURN_CLOSE


def _tools_block(request: Request) -> str:
    return TOOLS_INTRO + "".join("\n" + tojson(tool_dict(t)) for t in request.tools) + TOOLS_OUTRO


def _tool_message(message: Message, opens: bool, closes: bool) -> str:
    # The newline between two results ends the first: Qwen2.5 has no <tool_response> token,
    # and ">\n" | "<" is a pre-token boundary where "</tool_response>" | "\n<" is not.
    framing, closing = _tool_frame(opens, closes)
    return framing + _tool_body(message) + closing


def _tool_frame(opens: bool, closes: bool) -> tuple[str, str]:
    """A tool result's turn around its body, cut at its ``<tool_response>`` tags: an exact cut
    where the tokenizer has them as added tokens (Qwen3)."""
    head = "<|im_start|>user\n" if opens else ""
    tail = TURN_CLOSE if closes else "\n"
    return f"{head}<tool_response>", f"</tool_response>{tail}"


def _tool_body(message: Message) -> str:
    return f"\n{message_text(message)}\n"


def _tool_neighbours(messages: Sequence[Message], index: int) -> tuple[bool, bool]:
    opens = index == 0 or messages[index - 1].role != "tool"
    closes = index == len(messages) - 1 or messages[index + 1].role != "tool"
    return opens, closes


def _call_text(call: ToolCall, *, raw_strings: bool) -> str:
    args = call_arguments(call)
    rendered = args if raw_strings and isinstance(args, str) else tojson(args)
    return f'<tool_call>\n{{"name": "{call.name}", "arguments": {rendered}}}\n</tool_call>'


# --- Qwen3 -----------------------------------------------------------------------------------


def qwen3_head(request: Request) -> tuple[str, str]:
    """System part and tools part of a Qwen3 prompt; the tools' system-turn framing is tools'.
    An empty system prompt is a system turn (``messages[0].role == 'system'``), none is none."""
    system = request.system
    if not request.tools:
        return (_turn("system", system) if system is not None else ""), ""
    if system is not None:
        return f"<|im_start|>system\n{system}\n\n", _tools_block(request)
    return "", "<|im_start|>system\n" + _tools_block(request)


NO_QUERY = sys.maxsize
"""The pivot of Qwen3 messages without a user query: past every index, as the template's
``messages|length - 1`` is for rendering (no message comes after it)."""


def last_query_index(messages: Sequence[Message], start: int = 0, previous: int = NO_QUERY) -> int:
    """Index of the last user query (a user message that is not a wrapped tool result);
    ``NO_QUERY`` when there is none.

    ``previous`` is the result for ``messages[:start]``, so only ``messages[start:]`` is
    searched (``start=0`` knows nothing).
    """
    i = len(messages) - 1
    while i >= start:  # not range(): see qwen3_flags
        message = messages[i]
        if message.role == "user":  # a query unless its text only wraps a tool result
            text = message.content
            if not isinstance(text, str):
                text = message_text(message)
            if not (text.startswith(TOOL_OPEN) and text.endswith(TOOL_CLOSE)):
                return i
        i -= 1
    return previous if start else NO_QUERY


def split_reasoning(message: Message) -> tuple[str, str]:
    """``(content, reasoning)`` as Qwen3 reads them: ``reasoning`` or a ``<think>`` in content."""
    content = message_text(message)
    if message.reasoning is not None:
        return content, message.reasoning
    if "</think>" in content:
        before, after = content.split("</think>")[0], content.split("</think>")[-1]
        return after.lstrip("\n"), before.rstrip("\n").split("<think>")[-1].lstrip("\n")
    return content, ""


def _has_reasoning(message: Message) -> bool:
    """``bool(split_reasoning(message)[1])`` without splitting a reply that has no ``</think>``."""
    if message.reasoning is not None:
        return bool(message.reasoning)
    return "</think>" in message_text(message) and bool(split_reasoning(message)[1])


def _qwen3_calls(message: Message, content: str) -> str:
    if not message.tool_calls:
        return ""
    return "".join(
        ("\n" if i > 0 or content else "") + _call_text(call, raw_strings=True)
        for i, call in enumerate(message.tool_calls)
    )


def qwen3_assistant(message: Message, after_query: bool, last: bool) -> str:
    """One assistant turn; reasoning shows as ``<think>`` only after the last user query."""
    content, reasoning = split_reasoning(message)
    if after_query and (last or reasoning):
        text = f"<|im_start|>assistant\n<think>\n{reasoning.strip(chr(10))}\n</think>\n\n"
        text += content.lstrip("\n")
    else:
        text = "<|im_start|>assistant\n" + content
    return text + _qwen3_calls(message, content) + "<|im_end|>\n"


def qwen3_reply_body(message: Message) -> str | None:
    """What follows a reply's framing in ``qwen3_assistant``, which both renderings of a reply
    without reasoning share when it starts with a non-space; None otherwise (then the empty
    ``<think>`` block's ``lstrip`` may change the content, or no cut is proven)."""
    content = message.content
    if type(content) is not str or message.reasoning is not None or "</think>" in content:
        content, reasoning = split_reasoning(message)  # else there is nothing to split off
        if reasoning:
            return None
    if not content or content[0].isspace():
        return None
    return content + _qwen3_calls(message, content)


def qwen3_reply_frame(after_query: bool, last: bool) -> tuple[str, str]:
    """``(framing, closing)`` around ``qwen3_reply_body`` under a reply's flags."""
    return REPLY_OPEN + (NO_THINKING if after_query and last else ""), TURN_CLOSE


def qwen3_flags(messages: Sequence[Message], start: int, pivot: int) -> list[Hashable]:
    """The neighbour facts each Qwen3 message of ``messages[start:]`` renders by."""
    flags: list[Hashable] = []
    last = len(messages) - 1
    # A slice and a counter, not range(): a step calls this for two messages right after a
    # full count, with cold CPU caches, where range's C code is one more thing to fetch (as
    # min() in MessageCounts.count); tests/counting/test_counter_steps.py pins it.
    index = start - 1
    for message in messages[start:]:
        index += 1
        role = message.role
        if role == "assistant":
            # Reasoning shows after the last query, last or not: one flag value, one entry.
            # Before the last query it never shows: one value, and no need to look for it.
            after = index > pivot
            flags.append((after, after and (index == last or _has_reasoning(message))))
        elif role == "tool":
            flags.append(_tool_neighbours(messages, index))
        else:
            flags.append(())
    return flags


def qwen3_generation(enable_thinking: bool = True) -> str:
    """The generation prompt; ``enable_thinking=False`` adds an empty think block."""
    return "<|im_start|>assistant\n" + ("" if enable_thinking else NO_THINKING)


# --- Qwen2.5 ---------------------------------------------------------------------------------


def qwen25_head(request: Request) -> tuple[str, str]:
    """System part (the default system prompt when none is given, not when it is empty: the
    template tests the first message's role, not its text) and tools part."""
    system = QWEN25_DEFAULT_SYSTEM if request.system is None else request.system
    if not request.tools:
        return _turn("system", system), ""
    return f"<|im_start|>system\n{system}\n\n", _tools_block(request)


def qwen25_assistant(message: Message) -> str:
    """One assistant turn; Qwen2.5 never shows reasoning."""
    content = message_text(message)
    if not message.tool_calls:
        return _turn("assistant", content)
    text = "<|im_start|>assistant" + ("\n" + content if content else "")
    for call in message.tool_calls:
        text += "\n" + _call_text(call, raw_strings=False)
    return text + "<|im_end|>\n"


def qwen25_flags(messages: Sequence[Message], start: int, pivot: int) -> list[Hashable]:
    """Only tool results depend on their neighbours in Qwen2.5."""
    return [
        _tool_neighbours(messages, i) if messages[i].role == "tool" else ()
        for i in range(start, len(messages))
    ]


# --- the scheme ------------------------------------------------------------------------------


def _no_pivot(messages: Sequence[Message], start: int = 0, previous: int = NO_PIVOT) -> int:
    return NO_PIVOT


def _qwen25_generation(enable_thinking: bool) -> str:
    return REPLY_OPEN


@dataclass(frozen=True, slots=True)
class QwenTemplate:
    """One Qwen chat template's rules, as the functions above give them."""

    head: Callable[[Request], tuple[str, str]]
    pivot: Callable[[Sequence[Message], int, int], int]
    flags: Callable[[Sequence[Message], int, int], list[Hashable]]
    assistant: Callable[..., str]
    """An assistant turn, given the message and its flags."""
    generation: Callable[[bool], str]
    reply_body: Callable[[Message], str | None] | None
    """The cut of a reply into frame and body (``qwen3_reply_body``); None: no cut known."""
    named_by_tokenizer: bool
    """The counter is named as its tokenizer (``qwen3``), else as the template (``qwen2.5``)."""


QWEN_TEMPLATES = {
    "qwen3": QwenTemplate(
        qwen3_head, last_query_index, qwen3_flags, qwen3_assistant, qwen3_generation,
        qwen3_reply_body, True,
    ),
    "qwen2.5": QwenTemplate(
        qwen25_head, _no_pivot, qwen25_flags, qwen25_assistant, _qwen25_generation, None, False,
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class QwenScheme(MessageScheme):
    """Counts a request rendered by a native Qwen renderer with the Qwen tokenizer."""

    tokenizer: ExactTokenizer
    template: str = "qwen3"
    """``qwen3`` or ``qwen2.5`` (a key of ``QWEN_TEMPLATES``)."""
    enable_thinking: bool = True
    label: str | None = None
    """The counter's name when it is not the tokenizer's or template's (an ``hf:`` folder)."""
    _rules: QwenTemplate = field(init=False, repr=False, compare=False)
    """``QWEN_TEMPLATES[template]``."""
    _cuts: tuple[bool, bool] = field(init=False, repr=False, compare=False)
    """Which ``body`` cuts hold for this tokenizer: tool results, turns (and so replies)."""

    splits = True

    @property
    def name(self) -> str:
        if self.label is not None:
            return self.label
        return self.tokenizer.name if self._rules.named_by_tokenizer else self.template

    @property
    def kind(self) -> CounterKind:
        return "exact"

    def tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, special=True)) if text else 0

    def incremental(self) -> MessageCounts:
        rules = self._rules
        return MessageCounts(self, rules.pivot, rules.flags)

    def head_text(self, request: Request) -> tuple[str, str]:
        """The system part's and the tools part's text."""
        return self._rules.head(request)

    def head(self, request: Request) -> tuple[int, int]:
        system, tools = self._rules.head(request)
        return self.tokens(system), self.tokens(tools)

    def pivot(self, messages: Sequence[Message], start: int = 0, previous: int = NO_PIVOT) -> int:
        return self._rules.pivot(messages, start, previous)

    def flags(self, messages: Sequence[Message], start: int, pivot: int) -> list[Hashable]:
        return self._rules.flags(messages, start, pivot)

    def message_text(self, message: Message, flags: Hashable) -> str:
        """One message's text as the template renders it under ``flags``."""
        assert isinstance(flags, tuple)
        if message.role == "assistant":
            return self._rules.assistant(message, *flags)
        if message.role == "tool":
            return _tool_message(message, *flags)
        return _turn(message.role, message_text(message))

    def message(self, message: Message, flags: Hashable) -> tuple[int, bool]:
        tokens = self.tokens(self.message_text(message, flags))
        images = message.images
        if not images:
            return tokens, False
        return tokens + sum(qwen_image_tokens(i) for i in images), True

    def __post_init__(self) -> None:
        tokenizer = self.tokenizer
        rules = QWEN_TEMPLATES.get(self.template)
        if rules is None:
            raise ValueError(f"unknown Qwen template {self.template!r}")
        # A folder's tokenizer may normalise or match added tokens otherwise: no cut.
        own = not tokenizer.name.startswith(HF_PREFIX)
        # A tool result is cut at two added tokens, where the vocabulary has them (Qwen3).
        tags = tokenizer.is_cut_token(TOOL_OPEN) and tokenizer.is_cut_token(TOOL_CLOSE)
        # A turn's cut "...\n" | body, the body starting with a non-space, is exact for Qwen's
        # own tokenizers: no added token holds a "\n", so added tokens split out alike; NFC
        # composes nothing with "\n"; in QWEN_PATTERN / QWEN36_PATTERN only whitespace follows
        # a "\n" inside a pre-token, so none spans the cut, and no alternative looks behind, so
        # the body pre-tokenises as if alone; the framing does too: the one alternative that
        # could end otherwise at its end, "\s+(?!\S)", comes after "\s*[\r\n]+", which takes
        # the trailing whitespace up to the "\n" either way. BPE never merges across
        # pre-tokens. The closing starts with an added token. tests/counting/test_newline_cut.py
        # checks it.
        turns = own and tokenizer.pattern in _NL_CUT
        object.__setattr__(self, "_rules", rules)
        object.__setattr__(self, "_cuts", (own and tags, turns))  # decided once

    def body(self, message: Message) -> str | None:
        tool, turn = self._cuts
        text = message.content
        if not isinstance(text, str):
            if message.images:
                return None
            text = message_text(message)
        role = message.role
        if role == "tool":
            return _tool_body(message) if tool else None
        if not turn:
            return None
        if role == "assistant":
            reply_body = self._rules.reply_body
            return reply_body(message) if reply_body is not None else None
        return text if text and not text[0].isspace() else None

    def frame(self, role: str, flags: Hashable) -> tuple[str, str]:
        assert isinstance(flags, tuple)
        if role == "assistant":
            return qwen3_reply_frame(*flags)
        if role == "tool":
            return _tool_frame(*flags)
        return _turn_frame(role)

    def generation_text(self) -> str:
        """The generation prompt's text."""
        return self._rules.generation(self.enable_thinking)

    def generation(self) -> int:
        return self.tokens(self.generation_text())

    def render(self, request: Request) -> str:
        """The whole prompt text, as the Jinja template renders it."""
        system, tools = self.head_text(request)
        messages = request.messages
        flags = self.flags(messages, 0, self.pivot(messages))
        body = "".join(self.message_text(m, f) for m, f in zip(messages, flags, strict=True))
        return system + tools + body + self.generation_text()
