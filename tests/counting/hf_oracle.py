"""transformers as the oracle for ``hf:PATH``: requests in OpenAI shape and what it counts.

Bodies are generated in the OpenAI request shape; the oracle gets them as vLLM hands them to
``apply_chat_template`` (tool-call arguments parsed from JSON, null content as ``""``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st

SNIPPETS = (
    "数据分析", "こんにちは", "🙂", "👩‍💻", "e\u0301", "\n", "\n\n", "  ", "<tool_call>",
    "<|im_end|>", "</tool_response>", "<think>", "{\"a\": 1}", "héllo", "Ünïcödé", "\t",
)  # fmt: skip
texts = st.lists(st.sampled_from(SNIPPETS) | st.text(max_size=10), max_size=4).map("".join)
names = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)
json_leaf = st.none() | st.booleans() | st.integers(-1000, 1000) | texts
json_values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(names, json_values, max_size=3)


@st.composite
def tool_specs(draw: st.DrawFn) -> dict[str, Any]:
    props = draw(
        st.dictionaries(
            names,
            st.fixed_dictionaries(
                {"type": st.sampled_from(["string", "integer"]), "description": texts}
            ),
            max_size=3,
        )
    )
    parameters = {"type": "object", "properties": props, "required": sorted(props)[:1]}
    function = {"name": draw(names), "description": draw(texts), "parameters": parameters}
    return {"type": "function", "function": function}


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One user turn, then assistant replies, possibly tool calls and their results."""
    out: list[dict[str, Any]] = [{"role": "user", "content": draw(texts)}]
    for _ in range(draw(st.integers(0, 2))):
        calls = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": draw(names), "arguments": json.dumps(draw(arguments))},
            }
            for i in range(draw(st.integers(0, 2)))
        ]
        content = draw(st.none() | texts) if calls else draw(texts)
        reply: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            reply["tool_calls"] = calls
        out.append(reply)
        for call in calls:
            out.append({"role": "tool", "tool_call_id": call["id"], "content": draw(texts)})
        if not calls:
            break
    return out


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    """An OpenAI chat request: no system message, an empty one or one with text, tools, one to
    three user turns."""
    messages: list[dict[str, Any]] = []
    system = draw(st.none() | st.just("") | texts)  # an empty system turn renders apart
    if system is not None:
        messages.append({"role": "system", "content": system})
    for turn in draw(st.lists(turns(), min_size=1, max_size=3)):
        messages += turn
    body: dict[str, Any] = {"messages": messages}
    tools = draw(st.lists(tool_specs(), max_size=2))
    if tools:
        body["tools"] = tools
    return body


def vllm_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages as vLLM passes them to a template: arguments parsed, null content ''."""
    out = copy.deepcopy(body["messages"])
    for message in out:
        if message.get("content") is None:
            message["content"] = ""
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def oracle_count(tokenizer: Any, body: dict[str, Any]) -> int | None:
    """transformers' token count of ``body``; None when its template refuses the request."""
    from jinja2.exceptions import TemplateError

    try:
        ids = tokenizer.apply_chat_template(
            vllm_messages(body),
            tools=body.get("tools"),
            add_generation_prompt=True,
            tokenize=True,
        )
    except TemplateError:
        return None
    return len(ids)


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """``ctxbudget ARGS`` as the console script runs it: exit code, stdout, stderr."""
    import contextlib
    import io

    from ctxbudget.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()
