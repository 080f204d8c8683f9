"""Scripts for the mock model: a coding agent on a fake repository, and the seed's chat run.

A scenario's reply depends only on the request it is sent (the last user message and the id of
the last tool result), never on hidden state, so a compacted or resumed session continues.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Protocol

from ctxbudget.errors import UnknownNameError
from ctxbudget.messages.model import Message, Request, ToolCall, ToolSpec
from ctxbudget.providers import fakerepo

__all__ = [
    "SCENARIO_NAMES",
    "TOOLS",
    "ChatScenario",
    "CodingScenario",
    "Scenario",
    "get_scenario",
]

SCENARIO_NAMES = ("coding", "chat")


class Scenario(Protocol):
    """What the mock model plays: a floor (system + tools), user turns, replies and tools."""

    name: str
    system: str
    tools: tuple[ToolSpec, ...]
    max_output: int
    """The longest reply the script writes, in tokens: the max output its requests ask for."""

    def user_message(self, turn: int) -> str:
        """The user's message of turn ``turn`` (1-based)."""
        ...

    def reply(self, request: Request) -> Message:
        """The assistant's next message for ``request`` (no usage: the provider adds it)."""
        ...

    def run_tool(self, call: ToolCall) -> str:
        """The output of one tool call."""
        ...


def _path_param(description: str) -> dict[str, object]:
    # The name says it; a description per parameter would cost the floor ~10 tokens each.
    del description
    return {"type": "string"}


# Five tools, as in the seed's floor measurement (system 221 + tools 303 = 524 tokens); with
# the chat system prompt the floor is about 500 qwen3 tokens, most of it the template's tool block.
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "read_file",
        "Read a text file of the repository and return its content.",
        {
            "type": "object",
            "properties": {"path": _path_param("Path from the repository root")},
            "required": ["path"],
        },
    ),
    ToolSpec(
        "list_files",
        "List the files of the repository with their sizes in bytes.",
        {"type": "object", "properties": {}},
    ),
    ToolSpec(
        "grep",
        "Search a file for a fixed string and return the matching lines with line numbers.",
        {
            "type": "object",
            "properties": {
                "pattern": _path_param("Fixed string to look for"),
                "path": _path_param("File to search"),
            },
            "required": ["pattern", "path"],
        },
    ),
    ToolSpec(
        "edit_file",
        "Replace one exact occurrence of old text with new text in a file.",
        {
            "type": "object",
            "properties": {
                "path": _path_param("File to edit"),
                "old": _path_param("Exact text to replace"),
                "new": _path_param("Replacement text"),
            },
            "required": ["path", "old", "new"],
        },
    ),
    ToolSpec(
        "run_tests",
        "Run pytest on a test file and return its output.",
        {
            "type": "object",
            "properties": {"path": _path_param("Test file to run")},
            "required": ["path"],
        },
    ),
)

CODING_SYSTEM = (
    "You are a careful coding agent working in the repository `ledger`, a small bookkeeping "
    "library. Use the tools to read files, search, edit and run the tests; never guess the "
    "content of a file you have not read. Keep edits minimal and run the tests after each "
    "change. Quote error messages exactly. When a task is done, reply with a short summary of "
    "what changed and why. 回答用户时使用用户提问的语言。"
)
CHAT_SYSTEM = (
    "You are a friendly assistant in a long, casual conversation. The user may change the "
    "subject at any time; answer briefly and politely, in one short sentence, and do not call "
    "tools unless the user asks you to work with files or tests. Remember what the user told "
    "you earlier in the conversation when it matters."
)

_TURN = re.compile(r"^\s*(?:Task|任务|topic) (\d+)\s*[:：]")
_CALL = re.compile(r"^call_(\d+)_(\d+)_(\d+)$")


def _turn_of(request: Request) -> int | None:
    """The turn the request is in: the highest turn named by a user message or a tool call id.

    Turns only grow, and compaction may fold the current task's message into a summary while
    keeping its latest tool step, so the maximum over what is left is the current turn.
    """
    found: list[int] = []
    for message in request.messages:
        if message.role == "user" and not message.is_summary:
            match = _TURN.match(message.text)
            if match:
                found.append(int(match.group(1)))
        ids = [c.id for c in message.tool_calls]
        ids += [message.tool_call_id] if message.tool_call_id else []
        for call_id in ids:
            call = _CALL.match(call_id)
            if call:
                found.append(int(call.group(1)))
    return max(found) if found else None


@dataclass(frozen=True, slots=True)
class _Step:
    calls: tuple[tuple[str, dict[str, str]], ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class _Task:
    user: str
    steps: tuple[_Step, ...]
    answer: str


class CodingScenario:
    """A scripted coding agent: each user turn is a task of two to five tool steps."""

    name = "coding"
    system = CODING_SYSTEM
    tools = TOOLS
    max_output = 256

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _module(self, turn: int) -> str:
        return fakerepo.MODULES[(turn * 3 + self.seed) % len(fakerepo.MODULES)]

    def task(self, turn: int) -> _Task:
        """The task of turn ``turn``: its user message, tool steps and final answer."""
        module = self._module(turn)
        kind = (turn - 1) % 4
        src, test = f"ledger/{module}.py", f"tests/test_{module}.py"
        bug = fakerepo.bug_for(self.seed, turn, module)
        error = f"AssertionError: assert {bug.got} == {bug.expected}"
        if kind == 1:
            return _Task(
                f"任务 {turn}：阅读 docs/设计说明.md 和 {src}，用中文说明 {module} 模块的职责。",
                (
                    _Step((("read_file", {"path": "docs/设计说明.md"}),), "先看设计说明。"),
                    _Step(
                        (("grep", {"pattern": "def ", "path": src}), ("read_file", {"path": test})),
                        "再看函数列表和测试。",
                    ),
                ),
                f"{module} 模块负责账目处理中的一个环节：函数都以整数“分”计算金额，"
                f"公开函数都有对应测试（{test}）。设计说明要求修改金额代码时补充边界用例。",
            )
        fix_steps = (
            _Step((("run_tests", {"path": test}),), "Running the tests first."),
            _Step((("read_file", {"path": src}),), f"The failure is `{error}`; reading the code."),
            _Step(
                (("edit_file", {"path": src, "old": "// (places + 1)", "new": "// places + 1"}),),
                "Fixing the off-by-one.",
            ),
            _Step((("run_tests", {"path": test}),), "Re-running the tests."),
        )
        if kind == 0:
            return _Task(
                f"Task {turn}: tests/test_{module}.py::test_{bug.function} fails. "
                f"Find the bug in {src} and fix it.",
                fix_steps,
                f"Fixed `{bug.function}` in {src}: an off-by-one in the rounding step. "
                f"The failure was `{error}`; the test file passes now.",
            )
        if kind == 2:
            return _Task(
                f"Task {turn}: list the repository, then add a docstring to every function "
                f"in {src} that lacks one and check that the tests still pass.",
                (
                    _Step((("list_files", {}),), "Looking at the layout first."),
                    _Step((("read_file", {"path": src}),)),
                    _Step((("edit_file", {"path": src, "old": '"""', "new": '"""Doc: '}),)),
                    _Step((("run_tests", {"path": test}),)),
                ),
                f"All functions in {src} have docstrings now and the tests pass.",
            )
        return _Task(
            f"Task {turn}: CI reports a failure in {test} with a Chinese error message. "
            "Investigate and fix it.",
            (
                _Step((("grep", {"pattern": bug.function, "path": src}),)),
                *fix_steps[:2],
                *fix_steps[2:],
            ),
            f"The CI failure was `{error}` followed by a ValueError about the amount format; "
            f"fixed the rounding in {src} and the tests pass.",
        )

    def user_message(self, turn: int) -> str:
        return self.task(turn).user

    def reply(self, request: Request) -> Message:
        turn = _turn_of(request)
        if turn is None:
            return Message(role="assistant", content="I could not find a task to work on.")
        task = self.task(turn)
        step = 0
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool" and last.tool_call_id:
            match = _CALL.match(last.tool_call_id)
            if match and int(match.group(1)) == turn:
                step = int(match.group(2)) + 1
        if step >= len(task.steps):
            return Message(role="assistant", content=task.answer)
        planned = task.steps[step]
        calls = tuple(
            ToolCall(f"call_{turn}_{step}_{k}", name, json.dumps(args, ensure_ascii=False))
            for k, (name, args) in enumerate(planned.calls)
        )
        return Message(role="assistant", content=planned.note, tool_calls=calls)

    def run_tool(self, call: ToolCall) -> str:
        match = _CALL.match(call.id)
        args = call.parsed_arguments()
        args = args if isinstance(args, dict) else {}
        path = str(args.get("path", ""))
        turn, step = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        module = self._module(turn) if turn else fakerepo.MODULES[0]
        if call.name == "read_file":
            return fakerepo.read(self.seed, path)
        if call.name == "list_files":
            return fakerepo.file_list(self.seed)
        if call.name == "grep":
            return fakerepo.grep(self.seed, str(args.get("pattern", "")), path)
        if call.name == "edit_file":
            return f"Edited {path}: 1 occurrence replaced."
        if call.name == "run_tests":
            task = self.task(turn) if turn else None
            first_run = (
                task is not None
                and any(c[0] == "run_tests" for c in task.steps[step].calls)
                and all(c[0] != "edit_file" for s in task.steps[:step] for c in s.calls)
            )
            if first_run:
                chinese = (turn - 1) % 4 == 3
                return fakerepo.failing_run(self.seed, turn, module, chinese_error=chinese)
            return fakerepo.passing_run(self.seed, turn, module)
        return f"error: unknown tool {call.name!r}"


class ChatScenario:
    """The seed's experiment: one short, unrelated user message per turn and a short reply.

    English text: "topic N: nice weather today." twelve times (the seed's Chinese line,
    "第 N 个无关话题：今天天气不错。", costs 144 qwen3 tokens for twelve instead of 97).
    """

    name = "chat"
    system = CHAT_SYSTEM
    tools = TOOLS
    max_output = 32

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def user_message(self, turn: int) -> str:
        return " ".join([f"topic {turn}: nice weather today."] * 12)

    def reply(self, request: Request) -> Message:
        turn = _turn_of(request)
        text = f"Noted, topic {turn}: nice weather." if turn is not None else "Noted."
        return Message(role="assistant", content=text)

    def run_tool(self, call: ToolCall) -> str:
        return f"error: the chat scenario has no tool {call.name!r}"


def get_scenario(name: str, seed: int = 0) -> CodingScenario | ChatScenario:
    """The scenario called ``name`` (``coding`` or ``chat``)."""
    if name == "coding":
        return CodingScenario(seed)
    if name == "chat":
        return ChatScenario(seed)
    raise UnknownNameError("scenario", name, list(SCENARIO_NAMES))
