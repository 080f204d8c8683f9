"""Overflows a server does not report: a reply cut at a smaller real window, and a prompt an
Ollama-like server truncates and reports at its truncated size."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ctxbudget.agent.events import LoopEvent
from ctxbudget.agent.loop import Agent
from ctxbudget.agent.silent import cut_reply, truncated_prompt
from ctxbudget.cli.chat import chat_command
from ctxbudget.compaction.archive import Archive
from ctxbudget.counting import RequestCounter
from ctxbudget.messages import Usage
from ctxbudget.messages.openai import request_from_openai
from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))
from fakeserver import FakeServer, Recorded, Reply


def _reply(prompt: int, completion: int, finish: str = "stop", text: str = "ok") -> Reply:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    choice = {
        "index": 0,
        "finish_reason": finish,
        "message": {"role": "assistant", "content": text},
    }
    return Reply(body={"object": "chat.completion", "choices": [choice], "usage": usage})


def ollama_like(
    num_ctx: int, counter: RequestCounter, log: list[int]
) -> Callable[[Recorded], Reply]:
    """Ollama's /v1/chat/completions when the prompt exceeds ``num_ctx``: it drops the oldest
    messages (system messages stay, the newest always does) until the prompt fits, answers,
    and reports the truncated prompt's size (ollama/ollama server/prompt.go, chatPrompt)."""

    def answer(recorded: Recorded) -> Reply:
        request = request_from_openai(recorded.json())
        messages = request.messages
        start = 0
        while start < len(messages) - 1:
            if counter.count(request.with_messages(messages[start:])).total <= num_ctx:
                break
            start += 1
        prompt = counter.count(request.with_messages(messages[start:])).total
        log.append(start)
        return _reply(prompt, 5)

    return answer


@pytest.fixture(scope="module")
def qwen25() -> RequestCounter:
    return RequestCounter("qwen2.5")


def _paragraph(turn: int, words: int = 250) -> str:
    return " ".join(f"note{turn}-{i} about the build" for i in range(words // 4))


def _provider(server: FakeServer, window: int) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(
        base_url=server.base_url, model="my-model.gguf", api_key_env=None, window=window
    )


def test_cut_reply_finds_a_smaller_window_only() -> None:
    cut = cut_reply(Usage(input_tokens=1900, output_tokens=148), "length", asked=512, window=8192)
    assert cut is not None and cut.limit == 2048 and "148 of 512" in cut.reason
    # a reply that got all it asked for, a normal stop, or one that filled our own window
    assert (
        cut_reply(Usage(input_tokens=1900, output_tokens=512), "length", asked=512, window=8192)
        is None
    )
    assert (
        cut_reply(Usage(input_tokens=1900, output_tokens=100), "stop", asked=512, window=8192)
        is None
    )
    assert (
        cut_reply(Usage(input_tokens=1900, output_tokens=300), "length", asked=512, window=2048)
        is None
    )


def test_truncated_prompt_needs_a_real_gap() -> None:
    found = truncated_prompt(Usage(input_tokens=1800, output_tokens=5), 2600)
    assert found is not None and found.limit == 1800
    assert truncated_prompt(Usage(input_tokens=2590, output_tokens=5), 2600) is None  # noise
    assert truncated_prompt(Usage(input_tokens=10, output_tokens=5), 40) is None  # too few
    assert truncated_prompt(Usage(), 2600) is None  # no usage


def test_silent_overflow_adopts_the_cut_and_retries_once(qwen25: RequestCounter) -> None:
    events: list[LoopEvent] = []
    with FakeServer(_reply(1900, 148, "length"), _reply(600, 20)) as server:
        agent = Agent(
            _provider(server, 8192), window=8192, counter=qwen25, max_output_tokens=512,
            on_event=events.append,
        )  # fmt: skip
        reply = agent.run_turn("hello")
        sent = [r.json() for r in server.requests]
    assert reply.text == "ok" and agent.window == 2048
    changed = [e.data for e in events if e.kind == "window_changed"]
    assert (
        changed == [{"old": 8192, "window": 2048, "reason": changed[0]["reason"]}]
        and "stopped a reply for length" in changed[0]["reason"]
    )
    assert [e.data["trigger"] for e in events if e.kind == "compaction"] == ["context_overflow"]
    assert len(sent) == 2 and agent.overflows == 1
    # the cut reply was dropped: the view holds the user turn and the retried answer only
    assert [m.role for m in agent.messages] == ["user", "assistant"]


def test_a_cut_reply_never_grows_the_window(qwen25: RequestCounter) -> None:
    events: list[LoopEvent] = []
    # 1,800 + 300 is past our 2,048: the server's window is larger than ours, nothing to adopt
    with FakeServer(_reply(1800, 300, "length")) as server:
        agent = Agent(
            _provider(server, 2048), window=2048, counter=qwen25, max_output_tokens=512,
            on_event=events.append,
        )  # fmt: skip
        agent.run_turn("hello")
    assert agent.window == 2048 and agent.overflows == 0
    assert not [e for e in events if e.kind == "window_changed"]
    # (the usage-first count of 2,100 tokens may compact for pressure, never for overflow)
    assert all(e.data["trigger"] != "context_overflow" for e in events if e.kind == "compaction")


def test_ollama_like_truncation_is_caught_adopted_and_compacted(
    qwen25: RequestCounter, tmp_path: Path
) -> None:
    dropped: list[int] = []
    events: list[LoopEvent] = []
    turns = [_paragraph(t) for t in range(1, 7)]
    with FakeServer(responder=ollama_like(2048, qwen25, dropped)) as server:
        archive = Archive(tmp_path / "s.jsonl")
        agent = Agent(
            _provider(server, 8192), window=8192, counter=qwen25, max_output_tokens=64,
            archive=archive, on_event=events.append,
        )  # fmt: skip
        sizes = []
        for text in turns:
            agent.run_turn(text)
            sizes.append(qwen25.count(agent._sent).total)
        archive.close()
    truncated = [i for i, start in enumerate(dropped) if start]
    assert len(truncated) == 1, (dropped, sizes)  # once adopted, no request is cut again
    found = [e.data for e in events if e.kind == "overflow"]
    assert len(found) == 1 and found[0]["silent"] == "truncated"
    assert agent.window == found[0]["limit"] < 2048
    assert all(size <= agent.window for size in sizes[truncated[0] + 1 :])
    assert next(e.data["trigger"] for e in events if e.kind == "compaction") == "context_overflow"
    history = Archive(tmp_path / "s.jsonl").resumed.history
    assert [m.text for m in history if m.role == "user"] == turns
    assert sum(1 for m in history if m.role == "assistant") == len(turns)


def test_chat_tokenizer_option_counts_exactly_and_warns_on_truncation(
    qwen25: RequestCounter, tmp_path: Path
) -> None:
    dropped: list[int] = []
    turns = [_paragraph(t) for t in range(1, 6)]
    with FakeServer(responder=ollama_like(2048, qwen25, dropped)) as server:
        args: list[Any] = [
            "--base-url", server.base_url, "--model", "my-model.gguf", "--tokenizer", "qwen2.5",
            "--window", "8192", "--max-output", "64", "--json",
            "--archive", str(tmp_path / "c.jsonl"),
        ]  # fmt: skip
        result = CliRunner().invoke(chat_command, args, input="\n".join(turns) + "\n")
        models = {r.json()["model"] for r in server.requests}
    assert result.exit_code == 0, result.output
    assert models == {"my-model.gguf"}  # the server's name is sent; only counting changed
    out = json.loads(result.stdout)
    assert out["turns"] == len(turns) and out["overflows"] == 1 and out["window"] < 2048
    notices = [line for line in result.stderr.splitlines() if "window 8,192 ->" in line]
    assert len(notices) == 1 and "truncated the prompt" in notices[0]


def test_chat_rejects_an_unknown_tokenizer(tmp_path: Path) -> None:
    with FakeServer() as server:
        args = ["--base-url", server.base_url, "--model", "m", "--tokenizer", "nope"]
        result = CliRunner().invoke(chat_command, [*args, "--archive", str(tmp_path / "a")])
        assert server.requests == []
    assert result.exit_code != 0 and "unknown" in str(result.exception or result.output)
