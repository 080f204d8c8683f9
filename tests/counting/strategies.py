"""Hypothesis strategies for requests that exercise every branch of the Qwen templates."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from ctxbudget.messages.model import Message, Request, TextPart, ToolCall, ToolSpec

# Pieces that hit template branches: think tags, tool-response wrappers, blank lines, specials.
SNIPPETS = (
    "<think>", "</think>", "\n", "\n\n", "<tool_response>", "</tool_response>", " ", "<|im_end|>",
    "héllo", "数据", "e\u0301", "🙂", "{\"a\": 1}", "  ", "\t",
)  # fmt: skip
REPLY_LEADS = st.sampled_from(["", "", "\n", "\n\n", " ", "\t", "Ok", "数", "1", "<think>"])
texts = st.lists(st.sampled_from(SNIPPETS) | st.text(max_size=12), max_size=5).map("".join)

json_leaf = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=6)
nested_json = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=6), nested_json, max_size=3).map(
    lambda d: json.dumps(d, ensure_ascii=False)
) | st.sampled_from(["{}", "not json {", '"just a string"', "[1, 2]", "5"])
names = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)
tool_calls = st.lists(
    st.builds(ToolCall, id=st.just("c1"), name=names, arguments=arguments), max_size=3
)


def _content(text: str, split: bool) -> str | tuple[TextPart, ...]:
    if split and len(text) > 1:
        half = len(text) // 2
        return (TextPart(text[:half]), TextPart(text[half:]))
    return text


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["user", "user", "assistant", "assistant", "tool", "tool"]))
    lead = draw(REPLY_LEADS) if role == "assistant" else ""  # decides if a reply is cut
    content = _content(lead + draw(texts), draw(st.booleans()))
    if role == "assistant":
        reasoning = draw(st.none() | texts)
        return Message(
            role=role, content=content, reasoning=reasoning, tool_calls=tuple(draw(tool_calls))
        )
    if role == "tool":
        return Message(role=role, content=content, tool_call_id="c1")
    if draw(st.booleans()):  # a user turn that only wraps a tool response is not a "query"
        content = f"<tool_response>{draw(texts)}</tool_response>"
    return Message(role=role, content=content)


schema: Any = st.fixed_dictionaries(
    {
        "type": st.just("object"),
        "properties": st.dictionaries(
            names,
            st.fixed_dictionaries(
                {"type": st.sampled_from(["string", "integer"]), "description": texts}
            ),
            max_size=3,
        ),
    }
)
tools = st.lists(st.builds(ToolSpec, name=names, description=texts, parameters=schema), max_size=3)

# No system prompt (None), an empty one (an empty system turn) and text: three renderings.
systems = st.sampled_from([None, "", "You are a helpful assistant."]) | texts

requests = st.builds(
    lambda system, tools, msgs: Request(system=system, tools=tuple(tools), messages=tuple(msgs)),
    systems,
    tools,
    st.lists(messages(), min_size=1, max_size=8),
)
