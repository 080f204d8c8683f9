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
from ctxbudget.agent.silent import cut_reply, half_window, served_overflow, truncated_prompt
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


OLLAMA_NUM_KEEP = 4
"""Ollama's default ``num_keep`` (ollama/ollama api/types.go ``DefaultOptions``)."""


def ollama_like(
    num_ctx: int,
    counter: RequestCounter,
    log: list[int],
    *,
    model: str = "my-model.gguf",
    drop_messages: bool = True,
    serve_ps: bool = True,
) -> Callable[[Recorded], Reply]:
    """Ollama (ollama/ollama at fb3076099) when a prompt exceeds ``num_ctx``, at
    /v1/chat/completions:

    - it drops the oldest messages (system messages stay, the newest always does) until the
      prompt fits ``num_ctx`` (server/prompt.go ``chatPrompt``); ``drop_messages=False`` skips
      this, as ``/api/generate`` and a newest message longer than the window do;
    - a prompt still at ``num_ctx`` tokens or more keeps its first ``keep`` tokens (``num_keep``
      4, plus the BOS its tokenizer adds) and its tail, ``num_ctx - max((num_ctx - keep) // 2,
      1)`` tokens in all: about half the window (llm/llama_server.go
      ``completionPromptForRequest``/``contextShiftPromptLimit``; ollama/ollama#17427);
    - it answers and reports the prompt it kept as ``prompt_tokens``.

    ``GET /api/ps`` lists ``model`` with ``context_length`` ``num_ctx`` (api/types.go
    ``ProcessModelResponse``), or is a 404 with ``serve_ps=False`` (another server). ``log``
    gets the number of messages dropped, and -1 for a half-window cut.
    """

    def answer(recorded: Recorded) -> Reply:
        if recorded.path.endswith("/api/ps"):
            if not serve_ps:
                return Reply(status=404, body="404 page not found")
            loaded = {"name": model, "model": model, "size_vram": 1, "context_length": num_ctx}
            return Reply(body={"models": [loaded]})
        request = request_from_openai(recorded.json())
        messages = request.messages
        start = 0
        while drop_messages and start < len(messages) - 1:
            if counter.count(request.with_messages(messages[start:])).total <= num_ctx:
                break
            start += 1
        prompt = counter.count(request.with_messages(messages[start:])).total
        if prompt > num_ctx - 1:
            keep = min(OLLAMA_NUM_KEEP + 1, num_ctx - 1)
            prompt = num_ctx - max((num_ctx - keep) // 2, 1)
            start = -1
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


@pytest.mark.parametrize(
    ("drop_messages", "serve_ps"),
    [
        pytest.param(True, True, id="messages-dropped-window-asked"),
        pytest.param(False, True, id="half-window-cut-window-asked"),
        pytest.param(False, False, id="half-window-cut-signature"),
    ],
)
def test_ollama_truncation_adopts_the_real_window_not_the_kept_prompt(
    qwen25: RequestCounter, tmp_path: Path, drop_messages: bool, serve_ps: bool
) -> None:
    dropped: list[int] = []
    events: list[LoopEvent] = []
    turns = [_paragraph(t) for t in range(1, 7)]
    server_like = ollama_like(2048, qwen25, dropped, drop_messages=drop_messages, serve_ps=serve_ps)
    with FakeServer(responder=server_like) as server:
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
        asked = [r.path for r in server.requests if r.method == "GET"]
    truncated = [i for i, start in enumerate(dropped) if start]
    assert len(truncated) == 1, (dropped, sizes)  # once adopted, no request is cut again
    assert asked == ["/api/ps"]  # asked once, on the truncation
    found = [e.data for e in events if e.kind == "overflow"]
    assert len(found) == 1 and found[0]["silent"] == "truncated"
    # the server's num_ctx, not the prompt it kept (about half of it after a half-window cut)
    assert agent.window == found[0]["limit"] == 2048 > found[0]["prompt_tokens"]
    assert all(size <= agent.window for size in sizes[truncated[0] + 1 :])
    assert next(e.data["trigger"] for e in events if e.kind == "compaction") == "context_overflow"
    history = Archive(tmp_path / "s.jsonl").resumed.history
    assert [m.text for m in history if m.role == "user"] == turns
    assert sum(1 for m in history if m.role == "assistant") == len(turns)


def test_without_the_window_a_message_drop_adopts_the_kept_prompt(
    qwen25: RequestCounter,
) -> None:
    # The kept prompt is the request without its oldest messages: the window is only known to
    # be at least that, so that is what is adopted (never the half-window guess).
    dropped: list[int] = []
    events: list[LoopEvent] = []
    with FakeServer(responder=ollama_like(2048, qwen25, dropped, serve_ps=False)) as server:
        agent = Agent(
            _provider(server, 8192), window=8192, counter=qwen25, max_output_tokens=64,
            on_event=events.append,
        )  # fmt: skip
        for turn in range(1, 7):
            agent.run_turn(_paragraph(turn))
    found = [e.data for e in events if e.kind == "overflow"]
    assert len(found) == 1 and found[0]["silent"] == "truncated"
    assert agent.window == found[0]["limit"] == found[0]["prompt_tokens"] <= 2048
    assert sum(1 for start in dropped if start) == 1


def test_a_half_window_guess_still_truncated_falls_back_to_the_kept_prompt(
    qwen25: RequestCounter,
) -> None:
    # An older runner cut a prompt to exactly num_ctx (ollama/ollama runner/ollamarunner,
    # "truncating input prompt" limit=2048 ... new=2048): read as a half-window cut, the guess
    # is too large, and the next truncation shows it; the kept prompt is then adopted.
    def old_runner(recorded: Recorded) -> Reply:
        if recorded.method == "GET":
            return Reply(status=404, body="404 page not found")
        prompt = qwen25.count(request_from_openai(recorded.json())).total
        return _reply(min(prompt, 1024), 5)

    events: list[LoopEvent] = []
    with FakeServer(responder=old_runner) as server:
        agent = Agent(
            _provider(server, 8192), window=8192, counter=qwen25, max_output_tokens=64,
            on_event=events.append,
        )  # fmt: skip
        agent.run_turn("hello")
        agent.run_turn(" ".join(_paragraph(t) for t in range(1, 9)))
        for turn in range(10, 16):  # until a prompt between 1,024 and the guess is sent
            agent.run_turn(_paragraph(turn))
    limits = [e.data["limit"] for e in events if e.kind == "overflow"]
    assert limits == [2 * 1024 - 6, 1024] and agent.window == 1024


def test_half_window_never_exceeds_the_real_window() -> None:
    for num_ctx in range(64, 9000, 7):
        for keep in (4, 5):  # Ollama's num_keep, and with a BOS
            kept = num_ctx - max((num_ctx - keep) // 2, 1)
            found = half_window(kept, num_ctx + 100)
            assert found is not None and num_ctx - 2 <= found.limit <= num_ctx, (num_ctx, keep)
    # a kept prompt the size of the request without its oldest messages: a message drop
    assert half_window(1027, 3000, iter([2900, 2400, 1028, 700])) is None
    assert half_window(1027, 3000, iter([2900, 1500, 900])) is not None
    # a guess past what was sent is no half-window cut
    assert half_window(1027, 2000) is None
    assert half_window(0, 2000) is None


def test_a_served_window_is_taken_only_when_the_reply_allows_it() -> None:
    found = served_overflow(1027, 3000, 2048)
    assert found is not None and found.limit == 2048 and "/api/ps" in found.reason
    assert served_overflow(1027, 3000, None) is None
    assert served_overflow(1027, 3000, 1000) is None  # less than it kept
    assert served_overflow(1027, 3000, 4096) is None  # it would have kept all


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
        models = {r.json()["model"] for r in server.requests if r.method == "POST"}
    assert result.exit_code == 0, result.output
    assert models == {"my-model.gguf"}  # the server's name is sent; only counting changed
    out = json.loads(result.stdout)
    assert out["turns"] == len(turns) and out["overflows"] == 1 and out["window"] == 2048
    notices = [line for line in result.stderr.splitlines() if "window 8,192 ->" in line]
    assert len(notices) == 1 and "truncated the prompt" in notices[0]


def test_chat_rejects_an_unknown_tokenizer(tmp_path: Path) -> None:
    with FakeServer() as server:
        args = ["--base-url", server.base_url, "--model", "m", "--tokenizer", "nope"]
        result = CliRunner().invoke(chat_command, [*args, "--archive", str(tmp_path / "a")])
        assert server.requests == []
    assert result.exit_code != 0 and "unknown" in str(result.exception or result.output)
