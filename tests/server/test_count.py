"""``usage.prompt_tokens`` of a real llama.cpp server equals ctxbudget's count, request by
request: system prompts, multi-turn chats, tools, tool calls with JSON arguments, tool results,
CJK and emoji, with the model folder (``hf:PATH``) and the built-in ``qwen2.5`` alike."""

from __future__ import annotations

import json
import random
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
    system = _text(rng) if rng.random() < 0.7 else ""
    return Request(system=system, tools=tools, messages=tuple(messages), max_output_tokens=1)


def _cli_count(request: Request, model: str, where: Path) -> int:
    body = where / "body.json"
    body.write_text(json.dumps(request_to_openai(request)), encoding="utf-8")
    result = CliRunner().invoke(request_command, [str(body), "--model", model, "--json"])
    assert result.exit_code == 0, result.output
    tokens: int = json.loads(result.stdout)["tokens"]
    return tokens


@pytest.mark.parametrize("family", ["qwen2.5", "llama3"])
def test_prompt_tokens_equal_our_count(
    family: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Qwen2.5 also has a built-in name; the Llama-3-style folder is counted by hf:PATH only.
    server: LlamaServer = request.getfixturevalue(f"{family.replace('.', '')}_server")
    folder: Path = request.getfixturevalue(f"{family.replace('.', '')}_folder")
    names = [f"hf:{folder}", *(["qwen2.5"] if family == "qwen2.5" else [])]
    provider = OpenAICompatibleProvider(
        base_url=server.base_url, model=f"{family}-tiny.gguf", api_key_env=None
    )
    counters = {name: RequestCounter(name) for name in names}
    wrong: dict[str, list[tuple[int, int, int]]] = {}
    kinds = {"tools": 0, "tool_calls": 0, "cjk": 0, "emoji": 0, "system": 0, "multi_turn": 0}
    for seed in range(REQUESTS):
        sent = generated_request(seed)
        served = provider.complete(sent).usage.input_tokens
        ours = {name: counter.count(sent).total for name, counter in counters.items()}
        if seed % 10 == 0:  # the CLI a user runs, with the folder and with the model name
            ours |= {f"request --model {n}": _cli_count(sent, n, tmp_path) for n in names}
        for name, tokens in ours.items():
            if tokens != served:
                wrong.setdefault(name, []).append((seed, served, tokens))
        text = json.dumps(request_to_openai(sent), ensure_ascii=False)
        kinds["tools"] += bool(sent.tools)
        kinds["tool_calls"] += any(m.tool_calls for m in sent.messages)
        kinds["cjk"] += any("\u4e00" <= ch <= "\u9fff" for ch in text)
        kinds["emoji"] += "🚀" in text or "🎉" in text
        kinds["system"] += bool(sent.system)
        kinds["multi_turn"] += sum(m.role == "user" for m in sent.messages) > 1
    assert min(kinds.values()) >= 10, kinds  # every kind of request was sent, many times
    # (seed, the server's prompt_tokens, ctxbudget's count) for the first few that differ
    assert {name: cases[:5] for name, cases in wrong.items()} == {}
