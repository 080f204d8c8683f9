"""``ctxbudget chat`` end to end against the fake server: a smaller real window, streaming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.security.chatrun import Run, run_cli

from . import bodies
from .fakeserver import FakeServer, Reply

TEXT = "Hello! How can I assist you today?"
# vLLM's overflow text, for a server started with --max-model-len 6000.
VLLM_6000 = bodies.VLLM_OVERFLOW | {
    "message": bodies.VLLM_OVERFLOW["message"].replace("4096", "6000")
}
SMALLER_WINDOW = (
    Reply(body=bodies.OPENAI_CHAT),
    Reply(status=400, body=VLLM_6000),
    Reply(body=bodies.OPENAI_CHAT),
    Reply(body=bodies.OPENAI_CHAT),
)


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server needs none


def chat(
    server: FakeServer,
    archive: Path,
    extra: list[str],
    stdin: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Run:
    args = ["chat", "--base-url", server.base_url, "--model", "m", "--window", "32768"]
    args += ["--max-output", "512", "--archive", str(archive), *extra]
    return run_cli(args, capsys, monkeypatch, stdin)


def test_json_reports_the_adopted_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.jsonl"
    with FakeServer(*SMALLER_WINDOW) as server:
        run = chat(server, archive, ["--json"], "one\ntwo\nthree\n", capsys, monkeypatch)
    assert run.code == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["window"], summary["configured_window"]) == (6000, 32768)
    assert summary["overflows"] == 1 and summary["turns"] == 3
    assert [c["trigger"] for c in summary["compactions"]] == ["context_overflow"]
    assert "window 32,768 -> 6,000 tokens: the server stated its real context length" in run.stderr
    assert len(server.requests) == 4, "one overflow, one retry, then no more overflows"
    # Resumed, the session keeps the adopted window whatever --window says.
    with FakeServer(Reply(body=bodies.OPENAI_CHAT)) as server:
        again = chat(server, archive, ["--json"], "four\n", capsys, monkeypatch)
    assert json.loads(again.stdout)["window"] == 6000


def test_terminal_mode_says_so_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeServer(*SMALLER_WINDOW) as server:
        run = chat(server, tmp_path / "a.jsonl", [], "one\ntwo\nthree\n", capsys, monkeypatch)
    assert run.code == 0, run.stderr
    (line,) = [x for x in run.stderr.splitlines() if "window" in x]
    assert line.startswith("ctxbudget: window 32,768 -> 6,000 tokens")
    assert "compacted" in run.stdout and "context_overflow)" in run.stdout
    assert "window 6,000 | turns 3" in " ".join(run.stdout.split())
    assert run.stdout.count(f"model> {TEXT}") == 3


def test_stream_prints_the_reply_and_announces_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = (
        Reply(chunks=bodies.OPENAI_STREAM, cut_after=3),
        Reply(chunks=bodies.OPENAI_STREAM),
    )
    with FakeServer(*script) as server:
        run = chat(server, tmp_path / "a.jsonl", ["--stream"], "hi\n", capsys, monkeypatch)
    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["model> Hello! How can", f"model> {TEXT}"]
    assert "stream ended early after 3 chunks" in run.stderr
    assert "the reply starts over" in run.stderr
    assert server.requests[0].json()["stream"] is True


def test_json_with_stream_streams_but_prints_only_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeServer(Reply(chunks=bodies.OPENAI_STREAM)) as server:
        run = chat(
            server, tmp_path / "a.jsonl", ["--json", "--stream"], "hi\n", capsys, monkeypatch
        )
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["max_request_tokens"] == 19
    assert server.requests[0].json()["stream_options"] == {"include_usage": True}


def test_model_text_is_not_read_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = bodies.OPENAI_CHAT | {
        "choices": [
            {"message": {"role": "assistant", "content": "[/bold] [red]x"}, "finish_reason": "stop"}
        ]
    }
    with FakeServer(Reply(body=body)) as server:
        run = chat(server, tmp_path / "a.jsonl", [], "hi\n", capsys, monkeypatch)
    assert run.code == 0, run.stderr
    assert "model> [/bold] [red]x" in run.stdout
