"""``usage.prompt_tokens`` of a real llama.cpp server equals ctxbudget's count, request by
request: system prompts, multi-turn chats, tools, tool calls with JSON arguments, tool results,
CJK and emoji, with the model folder (``hf:PATH``) and the built-in ``qwen2.5`` alike."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from llama_harness import LlamaServer

from ctxbudget.cli.request import request_command
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Message, Request, ToolCall, ToolSpec
from ctxbudget.messages.openai import request_to_openai
from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

pytestmark = pytest.mark.server

REQUESTS = 120
TEXTS = (
    "Please read the config and tell me which port the service listens on.",
    "你好！请帮我总结一下这段代码的作用，并指出潜在的问题。",
    "日本語のテキストも混ぜます。東京は晴れです。",
    "Ship it 🚀🔥 — all green ✅, thanks 🙏🏽 👨‍👩‍👧‍👦",
    "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))\n",
    'The log said: {"level": "error", "msg": "disk full", "code": 28}',
    "  leading spaces, trailing tabs\t\t\nand a blank line\n\nthen more.",
    "Numbers 1234567890, 3.14159, -42 and a URL https://example.com/a?b=c&d=e",
    "Ελληνικά, русский текст, العربية, עברית — mixed scripts in one line.",
    "",
)
TOOLS = (
    ToolSpec(
        name="read_file",
        description="Read a file from the workspace.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Relative path"}},
            "required": ["path"],
        },
    ),
    ToolSpec(
        name="search",
        description="Search the web. 中文查询也可以。",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
                "filters": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    ),
)
ARGUMENTS = (
    {"path": "src/app.py"},
    {"query": "北京 天气", "limit": 3},
    {"query": "emoji 🎉 party", "filters": ["news", "blogs"], "limit": 10},
    {"path": "docs/README.md"},
)


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(TEXTS) for _ in range(rng.randint(1, 3))).strip() or "hi"


def _tool_step(rng: random.Random, turn: int) -> list[Message]:
    calls = tuple(
        ToolCall(
            id=f"call_{turn}_{i}",
            name="read_file" if "path" in args else "search",
            arguments=json.dumps(args, ensure_ascii=rng.random() < 0.5),
        )
        for i, args in enumerate(rng.sample(ARGUMENTS, rng.randint(1, 2)))
    )
    content = _text(rng) if rng.random() < 0.3 else ""
    step = [Message(role="assistant", content=content, tool_calls=calls)]
    for call in calls:
        step.append(Message(role="tool", content=_text(rng), tool_call_id=call.id, name=call.name))
    return step


def generated_request(seed: int) -> Request:
    """One request of a seeded mix; it ends on a user or tool message, as a loop sends it."""
    rng = random.Random(seed)
    tools = TOOLS if rng.random() < 0.5 else ()
    messages: list[Message] = []
    for turn in range(rng.randint(1, 4)):
        messages.append(Message(role="user", content=_text(rng)))
        if tools and rng.random() < 0.6:
            messages.extend(_tool_step(rng, turn))
        if turn < 3 and rng.random() < 0.7:
            messages.append(Message(role="assistant", content=_text(rng)))
    if messages[-1].role == "assistant":
        messages.append(Message(role="user", content=_text(rng)))
    # A system prompt with text, none (None) or an empty one (an empty system turn): as the
    # counting tier's generators (tests/counting/strategies.py, hf_oracle.py) draw them.
    draw = rng.random()
    system = _text(rng) if draw < 0.7 else None if draw < 0.85 else ""
    return Request(system=system, tools=tools, messages=tuple(messages), max_output_tokens=1)


def _cli_count(request: Request, model: str, where: Path) -> int:
    body = where / "body.json"
    body.write_text(json.dumps(request_to_openai(request)), encoding="utf-8")
    result = CliRunner().invoke(request_command, [str(body), "--model", model, "--json"])
    assert result.exit_code == 0, result.output
    tokens: int = json.loads(result.stdout)["tokens"]
    return tokens


Served = list[tuple[Request, int]]


def _served(server: LlamaServer, family: str) -> Served:
    """Every generated request with the server's ``usage.prompt_tokens`` for it."""
    provider = OpenAICompatibleProvider(
        base_url=server.base_url, model=f"{family}-tiny.gguf", api_key_env=None
    )
    out = []
    for seed in range(REQUESTS):
        sent = generated_request(seed)
        out.append((sent, provider.complete(sent).usage.input_tokens))
    return out


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> Callable[[str], tuple[Path, Served]]:
    """``served(family)``: its folder and the served requests, sent once per module."""
    cache: dict[str, tuple[Path, Served]] = {}

    def get(family: str) -> tuple[Path, Served]:
        if family not in cache:
            fixture = {"qwen2.5": "qwen", "llama3": "llama3"}[family]
            server: LlamaServer = request.getfixturevalue(f"{fixture}_server")
            folder: Path = request.getfixturevalue(f"{fixture}_folder")
            cache[family] = (folder, _served(server, family))
        return cache[family]

    return get


def test_the_generated_requests_cover_every_kind() -> None:
    kinds = {"tools": 0, "tool_calls": 0, "cjk": 0, "emoji": 0, "system": 0, "multi_turn": 0}
    kinds |= {"no_system": 0, "empty_system": 0}
    for seed in range(REQUESTS):
        sent = generated_request(seed)
        text = json.dumps(request_to_openai(sent), ensure_ascii=False)
        kinds["tools"] += bool(sent.tools)
        kinds["tool_calls"] += any(m.tool_calls for m in sent.messages)
        kinds["cjk"] += any("\u4e00" <= ch <= "\u9fff" for ch in text)
        kinds["emoji"] += "🚀" in text or "🎉" in text
        kinds["system"] += bool(sent.system)
        kinds["no_system"] += sent.system is None
        kinds["empty_system"] += sent.system == ""
        kinds["multi_turn"] += sum(m.role == "user" for m in sent.messages) > 1
    assert min(kinds.values()) >= 10, kinds  # every kind of request is sent, many times


# The Llama-3-style folder has no built-in name: it is counted by hf:PATH only.
CASES = [("qwen2.5", "hf"), ("qwen2.5", "qwen2.5"), ("llama3", "hf")]


@pytest.mark.parametrize(("family", "counter"), CASES)
def test_prompt_tokens_equal_request_counter(
    served: Callable[[str], tuple[Path, Served]], family: str, counter: str
) -> None:
    folder, cases = served(family)
    counting = RequestCounter(f"hf:{folder}" if counter == "hf" else counter)
    wrong = [(seed, real, ours) for seed, (sent, real) in enumerate(cases)
             if (ours := counting.count(sent).total) != real]  # fmt: skip
    assert len(cases) >= 100
    assert wrong[:5] == [], f"{len(wrong)} of {len(cases)} differ (seed, server, ctxbudget)"


@pytest.mark.parametrize(("family", "model"), CASES)
def test_prompt_tokens_equal_the_request_command(
    served: Callable[[str], tuple[Path, Served]], family: str, model: str, tmp_path: Path
) -> None:
    """``ctxbudget request --model hf:PATH|qwen2.5``, on every tenth request (a process-like
    CLI run loads its tokenizer each time)."""
    folder, cases = served(family)
    name = f"hf:{folder}" if model == "hf" else model
    wrong = [(seed, real, ours) for seed, (sent, real) in enumerate(cases) if seed % 10 == 0
             if (ours := _cli_count(sent, name, tmp_path)) != real]  # fmt: skip
    assert wrong[:5] == [], f"{len(wrong)} of {len(cases) // 10} differ (seed, server, ctxbudget)"
