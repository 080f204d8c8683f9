"""OpenAI models: the hidden chat template estimated by OpenAI's published constants.

Per message: 3 tokens + role + content, +1 for a ``name``; 3 more prime the reply (OpenAI
cookbook, "How to count tokens with tiktoken", ``num_tokens_from_messages``). Tool schemas are
counted as the ``namespace functions`` TypeScript-like text that hmarr/openai-chat-tokens and
litellm (``_format_function_definitions``) reverse-engineered, plus 9 tokens, less 4 when
there is a system message (the same sources' constants).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxbudget.counting.images import openai_image_tokens
from ctxbudget.counting.scheme import MessageScheme
from ctxbudget.counting.template_input import message_text, plain
from ctxbudget.messages.model import Message, Request, ToolSpec
from ctxbudget.tokens.base import CounterKind, TokenCounter

TOKENS_PER_MESSAGE = 3  # <|start|>{role}\n{content}<|end|>\n: OpenAI cookbook
TOKENS_PER_NAME = 1  # OpenAI cookbook
REPLY_PRIMER = 3  # <|start|>assistant<|message|>: OpenAI cookbook
TOOLS_OVERHEAD = 9  # hmarr/openai-chat-tokens, litellm token_counter._count_tool_definitions
TOOLS_SYSTEM_DISCOUNT = 4  # the same sources: tools share the system message's framing


def _ts_type(schema: Any, indent: int) -> str:
    """A JSON-schema type in the TypeScript-like notation OpenAI's tool rendering uses."""
    if not isinstance(schema, Mapping):
        return "any"
    kind, enum = schema.get("type"), schema.get("enum")
    if kind in ("string", "integer", "number") and isinstance(enum, list):
        return " | ".join(f'"{item}"' for item in enum)
    simple = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean"}
    if kind in simple:
        return simple[kind]
    if kind == "null":
        return "null"
    if kind == "array":
        return _ts_type(schema.get("items"), indent) + "[]"
    if kind == "object":
        return "{\n" + _ts_properties(schema, indent + 2) + "\n}"
    return "any"


def _ts_properties(schema: Mapping[str, Any], indent: int) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return ""
    required = schema.get("required")
    required = tuple(required) if isinstance(required, list | tuple) else ()
    lines: list[str] = []
    for key, prop in properties.items():
        description = prop.get("description") if isinstance(prop, Mapping) else None
        if description:
            lines.append(f"// {description}")
        optional = "" if key in required else "?"
        lines.append(f"{key}{optional}: {_ts_type(prop, indent)},")
    return "\n".join(" " * indent + line for line in lines)


def _tool_lines(tool: ToolSpec) -> list[str]:
    lines = [f"// {tool.description}"] if tool.description else []
    parameters = plain(tool.parameters)
    if isinstance(parameters.get("properties"), Mapping) and parameters["properties"]:
        lines += [f"type {tool.name} = (_: {{", _ts_properties(parameters, 0), "}) => any;"]
    else:
        lines.append(f"type {tool.name} = () => any;")
    return [*lines, ""]


def tools_text(tools: Sequence[ToolSpec]) -> str:
    """The ``namespace functions { ... }`` text OpenAI is understood to put in the system turn."""
    lines = ["namespace functions {", ""]
    for tool in tools:
        if tool.name:
            lines += _tool_lines(tool)
    lines.append("} // namespace functions")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class OpenAIScheme(MessageScheme):
    """Counts with an OpenAI encoding and the published per-message constants."""

    counter: TokenCounter

    @property
    def name(self) -> str:
        return self.counter.name

    @property
    def kind(self) -> CounterKind:
        return "estimate"  # the template is hidden; the constants are OpenAI's published ones

    def _turn(self, role: str, text: str, name: str | None = None) -> int:
        tokens = TOKENS_PER_MESSAGE + self.counter.count(role) + self.counter.count(text)
        if name:
            tokens += TOKENS_PER_NAME + self.counter.count(name)
        return tokens

    def head(self, request: Request) -> tuple[int, int]:
        # An empty system message is still a message: it pays its framing, as an empty user
        # message does, and the tools share that framing.
        text = request.system
        system = self._turn("system", text) if text is not None else 0
        if not request.tools:
            return system, 0
        discount = TOOLS_SYSTEM_DISCOUNT if text is not None else 0
        return system, self.counter.count(tools_text(request.tools)) + TOOLS_OVERHEAD - discount

    def message(self, message: Message, flags: Hashable) -> tuple[int, bool]:
        # Reasoning is not resent in chat completions; a call costs its name and arguments
        # (litellm counts the arguments; the name is in the model's output too).
        tokens = self._turn(message.role, message_text(message), message.name)
        for call in message.tool_calls:
            tokens += self.counter.count(call.name) + self.counter.count(call.arguments)
        tokens += sum(openai_image_tokens(image) for image in message.images)
        return tokens, False

    def generation(self) -> int:
        return REPLY_PRIMER
