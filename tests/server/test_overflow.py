"""A real llama.cpp server with a 2,048-token window behind a session configured for 8,192:
its overflow error, and the reply it silently cuts at ``n_ctx``, are recognised, the real
window adopted, the view compacted and the turn retried once; every turn finishes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from llama_harness import SERVER_CTX, LlamaServer

from ctxbudget.agent.events import LoopEvent
from ctxbudget.agent.loop import Agent
from ctxbudget.cli.chat import DEFAULT_SYSTEM, chat_command
from ctxbudget.compaction.archive import Archive
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Message, Request
from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

pytestmark = pytest.mark.server

WINDOW = 8192
"""What the user configured: four times what the server really has."""
# Replies are short: with --ignore-eos each is exactly max_output tokens, and generating them
# (not the prompts) is what takes time on a small CPU.
FIRST_TASK = "Keep notes on the build logs I paste, and answer briefly."


def sized_text(counter: RequestCounter, before: Request, target: int, seed: int) -> str:
    """A user message that brings ``before`` (plus it) to about ``target`` tokens."""
    words = [f"log{seed}-{i} step finished in {i % 97} ms;" for i in range(4000)]

    def size(n: int) -> int:
        message = Message(role="user", content=" ".join(words[:n]))
        return counter.count(before.with_messages((*before.messages, message))).total

    low, high = 1, len(words)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if size(middle) <= target else (low, middle - 1)
    return " ".join(words[:low])


def _agent(
    server: LlamaServer, folder: Path, archive: Archive, stream: bool, *, max_output: int
) -> tuple[Agent, RequestCounter, list[LoopEvent]]:
    """A session configured for ``WINDOW`` on ``server``; its events land in the list."""
    counter = RequestCounter(f"hf:{folder}")
    provider = OpenAICompatibleProvider(
        base_url=server.base_url, model="tiny.gguf", api_key_env=None, stream=stream
    )
    events: list[LoopEvent] = []
    agent = Agent(
        provider, system=DEFAULT_SYSTEM, window=WINDOW, counter=counter,
        max_output_tokens=max_output, archive=archive, on_event=events.append,
    )  # fmt: skip
    return agent, counter, events


def _turns(agent: Agent, counter: RequestCounter, targets: list[int]) -> list[str]:
    """Run the first task, then one turn per target size; returns the user texts."""
    texts = [FIRST_TASK]
    agent.run_turn(FIRST_TASK)
    for seed, target in enumerate(targets):
        text = sized_text(counter, agent.request(), target, seed)
        texts.append(text)
        agent.run_turn(text)
    return texts


def _per_turn(events: list[LoopEvent], kind: str) -> dict[int, int]:
    found: dict[int, int] = {}
    for event in events:
        if event.kind == kind:
            found[event.turn] = found.get(event.turn, 0) + 1
    return found


def _archived(path: Path) -> tuple[list[str], int]:
    history = Archive(path).resumed.history
    users = [m.text for m in history if m.role == "user" and not m.is_summary]
    return users, sum(1 for m in history if m.role == "assistant")


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_agent_adopts_n_ctx_from_the_real_overflow_error(
    qwen_server: LlamaServer, qwen_folder: Path, tmp_path: Path, stream: bool
) -> None:
    archive = Archive(tmp_path / "s.jsonl")
    agent, counter, events = _agent(qwen_server, qwen_folder, archive, stream, max_output=32)
    # turn 3's prompt alone is past 2,048: the server refuses it before generating anything
    texts = _turns(agent, counter, [1000, SERVER_CTX + 250, 600])
    archive.close()
    overflows = [e for e in events if e.kind == "overflow"]
    assert len(overflows) == 1 and overflows[0].turn == 3, [e.to_json() for e in overflows]
    found = overflows[0].data
    assert found["limit"] == SERVER_CTX and "silent" not in found
    assert "exceeds the available context size" in found["message"]
    assert agent.window == SERVER_CTX and agent.overflows == 1
    assert _per_turn(events, "request")[3] == 2  # refused, compacted, retried exactly once
    triggers = [e.data["trigger"] for e in events if e.kind == "compaction" and e.turn == 3]
    assert triggers[0] == "context_overflow"
    users, replies = _archived(tmp_path / "s.jsonl")
    assert users == texts and replies == len(texts)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_agent_catches_the_silent_cut_at_n_ctx(
    qwen_server: LlamaServer, qwen_folder: Path, tmp_path: Path, stream: bool
) -> None:
    archive = Archive(tmp_path / "s.jsonl")
    agent, counter, events = _agent(qwen_server, qwen_folder, archive, stream, max_output=128)
    # turn 2's prompt fits the server; prompt + 128 reply tokens does not: the reply is cut
    texts = _turns(agent, counter, [SERVER_CTX - 60, 300])
    archive.close()
    overflows = [e for e in events if e.kind == "overflow"]
    assert len(overflows) == 1 and overflows[0].turn == 2, [e.to_json() for e in overflows]
    cut = overflows[0].data
    assert cut["silent"] == "length" and cut["limit"] == SERVER_CTX
    changed = [e.data for e in events if e.kind == "window_changed"]
    assert [(c["old"], c["window"]) for c in changed] == [(WINDOW, SERVER_CTX)]
    assert _per_turn(events, "request")[2] == 2  # cut, compacted, retried exactly once
    assert agent.window == SERVER_CTX  # and never anything larger afterwards
    users, replies = _archived(tmp_path / "s.jsonl")
    assert users == texts and replies == len(texts)


def test_chat_cli_recovers_from_the_real_overflow(
    qwen_server: LlamaServer, qwen_folder: Path, tmp_path: Path
) -> None:
    counter = RequestCounter(f"hf:{qwen_folder}")
    empty = Request(system=DEFAULT_SYSTEM)
    # each line alone fits; the third brings the conversation past the server's 2,048
    lines = [FIRST_TASK, *(sized_text(counter, empty, 1000, seed) for seed in range(3))]
    archive = tmp_path / "chat.jsonl"
    args = [
        "--base-url", qwen_server.base_url, "--model", "my-model.gguf",
        "--tokenizer", f"hf:{qwen_folder}", "--window", str(WINDOW), "--max-output", "32",
        "--json", "--archive", str(archive),
    ]  # fmt: skip
    result = CliRunner().invoke(chat_command, args, input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["turns"] == len(lines) and out["window"] == SERVER_CTX
    assert out["overflows"] == 1 and out["configured_window"] == WINDOW
    assert out["compactions"][0]["trigger"] == "context_overflow"
    notices = [line for line in result.stderr.splitlines() if "window 8,192 -> 2,048" in line]
    assert len(notices) == 1, result.stderr
    users, replies = _archived(archive)
    assert users == lines and replies == len(lines)
