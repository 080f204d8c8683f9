"""Test doubles for compaction: a small counter, conversation builders, scripted summarizers."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ctxbudget.counting.result import RequestCount
from ctxbudget.messages.model import Message, Request, ToolCall

GENERATION_PROMPT = 3


def message_tokens(m: Message) -> int:
    """len(text)//4 + 4 per message, tool calls and reasoning included, 85 per image."""
    text = m.text + (m.reasoning or "") + "".join(c.name + c.arguments for c in m.tool_calls)
    return len(text) // 4 + 4 + 85 * len(m.images)


class FakeCounter:
    """Counts like a template would: a fixed framing, per-message costs, a generation prompt."""

    name = "fake"
    kind = "estimate"

    def __init__(self) -> None:
        self.calls = 0

    def count(self, request: Request) -> RequestCount:
        self.calls += 1
        system = len(request.system or "") // 4 + 10
        tools = (
            sum(
                len(t.name) + len(t.description) + len(json.dumps(dict(t.parameters)))
                for t in request.tools
            )
            // 4
        )
        per = [message_tokens(m) for m in request.messages]
        if per:
            per[-1] += GENERATION_PROMPT
        return RequestCount(
            counter=self.name,
            kind="estimate",
            total=system + tools + sum(per),
            system=system,
            tools=tools,
            messages=sum(per),
            per_message=tuple(per),
            floor=system + tools,
        )


def user(text: str) -> Message:
    return Message(role="user", content=text)


def reply(text: str) -> Message:
    return Message(role="assistant", content=text)


def call(call_id: str, name: str, **args: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args))


def asks(*calls: ToolCall, text: str = "") -> Message:
    return Message(role="assistant", content=text, tool_calls=calls)


def result(call_id: str, text: str, name: str = "run") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name=name)


def coding_session(steps: int, output_chars: int = 1_200) -> tuple[Message, ...]:
    """One user task followed by ``steps`` tool steps (one long user turn, as coding agents run)."""
    out: list[Message] = [user("Fix the failing test in tests/test_dates.py; keep the public API.")]
    for i in range(steps):
        cid = f"c{i}"
        if i % 3 == 0:
            out.append(asks(call(cid, "read_file", path=f"src/mod{i}.py")))
            out.append(
                result(cid, f"# file mod{i}\n" + "x = 1\n" * (output_chars // 6), "read_file")
            )
        elif i % 3 == 1:
            out.append(asks(call(cid, "run", command="pytest -q")))
            body = "." * (output_chars - 80)
            out.append(
                result(
                    cid,
                    f"{body}\nFAILED tests/test_dates.py::test_{i} - "
                    f"AssertionError: assert {i} == {i + 1}\n",
                )
            )
        else:
            out.append(asks(call(cid, "edit_file", path=f"src/mod{i}.py", old="a", new="b")))
            out.append(result(cid, "edited", "edit_file"))
    return tuple(out)


def tool_pairs_ok(messages: Sequence[Message]) -> bool:
    """Every tool result follows its call in the view, and every call has all its results."""
    calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m.role == "assistant":
            calls.update(c.id for c in m.tool_calls)
        elif m.role == "tool":
            if m.tool_call_id not in calls:
                return False
            answered.add(m.tool_call_id)
    return calls <= answered


class ScriptedSummarizer:
    """Returns a fixed summary and records every request it was given."""

    def __init__(
        self,
        text: str = "## Goal\nFix the test.\n\n## Next steps\n- rerun pytest",
        window: int | None = None,
    ) -> None:
        self.text = text
        self.requests: list[Request] = []
        if window is not None:
            self.window = window

    def summarize(self, request: Request) -> str:
        self.requests.append(request)
        return self.text
