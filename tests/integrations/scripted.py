"""A scripted coding model behind every framework's fake: a long tool loop, a real window.

``ScriptedModel.respond`` takes an OpenAI chat-completions body and answers as the server would:
the next step of the task with usage, a handoff summary for a summarizer request, or OpenAI's
real ``context_length_exceeded`` error when the prompt is over the server's window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.counting import count_request
from ctxbudget.integrations._guard import ContextGuard
from ctxbudget.messages.openai import request_from_openai

TOKENIZER = "o200k_base"
EXACT_TOKENIZER = "qwen3"
"""A counter that is exact for its model: usage reports are checked against its counts."""
SERVER_WINDOW = 4_000
"""The server's real context length; the adapters are configured with a larger one."""
CONFIGURED_WINDOW = 8_000
FILES = tuple(f"src/shop/module_{i:02d}.py" for i in range(30))
ERROR_LINE = "E   AssertionError: parse_price('12,50') returned 1250, expected 12.5"
TOOL_STEPS = 44
"""Tool calls before the final answer: 45 model steps in all."""
FINAL_ANSWER = "Done: parse_price handles decimal commas; all 30 modules reviewed."
TASK = "Review every module under src/shop and fix the failing price test."


def overflow_message(prompt: int, window: int = SERVER_WINDOW) -> str:
    """OpenAI's chat-completions text for a prompt over the window."""
    return (
        f"This model's maximum context length is {window} tokens. However, your messages "
        f"resulted in {prompt} tokens. Please reduce the length of the messages."
    )


def overflow_body(prompt: int, window: int = SERVER_WINDOW) -> dict[str, Any]:
    """OpenAI's error body for ``context_length_exceeded`` (HTTP 400)."""
    return {
        "error": {
            "message": overflow_message(prompt, window),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def tool_output(name: str, args: dict[str, Any]) -> str:
    """What the task's tools print: a long listing, or a test run with one failure."""
    if name == "read_file":
        path = args["path"]
        lines = [f"# {path}"]
        lines += [
            f"def helper_{i}(value):  # line {i} of {path}\n    return value" for i in range(12)
        ]
        return "\n".join(lines)
    command = args["command"]
    lines = [f"$ {command}", "============ test session starts ============"]
    lines += [f"tests/test_shop.py::test_case_{i} PASSED" for i in range(20)]
    lines += ["tests/test_shop.py::test_parse_price FAILED", ERROR_LINE, "1 failed, 20 passed"]
    return "\n".join(lines)


def read_file(path: str) -> str:
    """Read a file."""
    return tool_output("read_file", {"path": path})


def run(command: str) -> str:
    """Run a shell command."""
    return tool_output("run", {"command": command})


def step_call(step: int) -> tuple[str, dict[str, Any]]:
    """The tool call of model step ``step`` (0-based): reads, with a test run every 3rd step."""
    if step % 3 == 2:
        return "run", {"command": f"pytest -q tests/test_shop.py -k step{step}"}
    return "read_file", {"path": FILES[(step - step // 3) % len(FILES)]}


@dataclass
class ScriptedModel:
    """The model and its server: step counter, window check, and a log of what it was sent."""

    window: int = SERVER_WINDOW
    tokenizer: str = TOKENIZER
    """The server's own counter (``qwen3``: an exact one, the adapter counting with it too)."""
    uncached_only: bool = False
    """Report only the uncached part of each prompt: a request that extends the last one
    answered reports the tokens after it, as an adapter that drops the cached part would."""
    step: int = 0
    prompts: list[int] = field(default_factory=list)
    """Prompt tokens of every task request, in order (rejected ones included)."""
    rejected: list[int] = field(default_factory=list)
    """Indices into ``prompts`` of the requests rejected as over the window."""
    summaries: int = 0
    unpaired: list[str] = field(default_factory=list)
    _cached: tuple[list[dict[str, Any]], int] = ([], 0)
    """The messages of the last request answered and their prompt tokens (the cache)."""

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for one chat-completions request."""
        request = request_from_openai(body)
        prompt = count_request(request, self.tokenizer).total
        if (request.system or "").startswith(SUMMARIZER_SYSTEM[:60]):
            self.summaries += 1
            if prompt > self.window:
                return 400, overflow_body(prompt, self.window)
            return 200, self._reply(prompt, content=_summary_text(), calls=())
        self.prompts.append(prompt)
        self._check_pairs(body["messages"])
        if prompt > self.window:
            self.rejected.append(len(self.prompts) - 1)
            return 400, overflow_body(prompt, self.window)
        step, self.step = self.step, self.step + 1
        reported = self._reported(body["messages"], prompt)
        if step >= TOOL_STEPS:
            return 200, self._reply(reported, content=FINAL_ANSWER, calls=())
        name, args = step_call(step)
        call = {
            "id": f"call_{step:03d}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        return 200, self._reply(reported, content=None, calls=(call,))

    def _reported(self, messages: list[dict[str, Any]], prompt: int) -> int:
        """The prompt tokens the usage states: all of them, or only those after the cache."""
        if not self.uncached_only:
            return prompt
        cached, cached_tokens = self._cached
        self._cached = (messages, prompt)
        if cached and messages[: len(cached)] == cached:
            return max(1, prompt - cached_tokens)
        return prompt

    def _check_pairs(self, messages: list[dict[str, Any]]) -> None:
        open_calls: set[str] = set()
        for m in messages:
            if m["role"] == "assistant":
                if open_calls:
                    self.unpaired.append(f"calls {sorted(open_calls)} unanswered")
                open_calls = {c["id"] for c in m.get("tool_calls") or ()}
            elif m["role"] == "tool":
                if m["tool_call_id"] not in open_calls:
                    self.unpaired.append(f"result {m['tool_call_id']} without its call")
                open_calls.discard(m["tool_call_id"])
            elif open_calls:
                self.unpaired.append(f"calls {sorted(open_calls)} unanswered")
                open_calls = set()

    def _reply(
        self, prompt: int, *, content: str | None, calls: tuple[dict[str, Any], ...]
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = list(calls)
        out = request_from_openai({"messages": [message]})
        completion = count_request(out, self.tokenizer).messages
        return {
            "id": f"chatcmpl-{len(self.prompts)}",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    # -- what the tests check ------------------------------------------------------------------

    def accepted_steps(self) -> int:
        """Task requests the server answered."""
        return len(self.prompts) - len(self.rejected)

    def over_window_after_first_recovery(self) -> list[int]:
        """Prompt sizes over the window sent after the first rejection."""
        if not self.rejected:
            return [p for p in self.prompts if p > self.window]
        return [p for p in self.prompts[self.rejected[0] + 1 :] if p > self.window]


def _summary_text() -> str:
    # A terse model summary: the harness itself must add the exact error and the file lists.
    return (
        "## Goal\nReview the shop modules and fix the failing price test.\n\n"
        "## Progress\n### Done\nRead modules, ran the tests.\n\n"
        "## Next steps\nKeep reading the modules."
    )


def openai_tools() -> list[dict[str, Any]]:
    """The task's two tools in the chat-completions format."""
    return [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "run",
                "description": "Run a shell command.",
                "parameters": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            },
        },
    ]


def check_long_loop(script: ScriptedModel, guard: ContextGuard) -> None:
    """What every adapter's long tool loop must show: it finished inside the server's window
    after one overflow, adopted that window, counted usage-first and summarized the work."""
    assert script.accepted_steps() >= 40
    assert script.rejected, "the server's smaller window must have been hit once"
    assert script.over_window_after_first_recovery() == []
    assert script.unpaired == []
    assert guard.overflows == 1 and guard.window == script.window  # the error's stated limit
    assert guard.sources["usage"] > guard.sources["count"]  # usage-first
    summary = guard.summaries[-1]
    assert ERROR_LINE in summary
    assert all(path in summary for path in FILES[:3])


def check_under_reported_loop(script: ScriptedModel, guard: ContextGuard) -> None:
    """What every adapter's long tool loop must show when the usage reports under-state the
    prompt and the counter is exact: the reports were passed over (said once), and counting the
    requests kept every one of them inside the server's window."""
    assert script.accepted_steps() >= 40
    assert script.rejected == [], [script.prompts[i] for i in script.rejected]
    assert script.unpaired == []
    assert guard.overflows == 0 and guard.compactions
    gap = guard.usage_trust.passed_over
    assert gap is not None and gap.reported < 0.9 * gap.counted
    assert guard.sources["count"] > guard.sources["usage"]
