"""``ctxbudget demo`` and ``ctxbudget chat``: the JSON contract, resume, the floor error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxbudget.cli.chat import chat_command
from ctxbudget.cli.demo import demo_command
from ctxbudget.errors import PromptFloorExceeded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))
from fakeserver import FakeServer, Reply

KEYS = {
    "window",
    "turns",
    "floor_tokens",
    "max_request_tokens",
    "overflows",
    "archive",
    "compactions",
}
COMPACTION_KEYS = {
    "turn",
    "trigger",
    "strategy",
    "messages_before",
    "messages_after",
    "tokens_before",
    "tokens_after",
}


def test_demo_chat_json_is_the_seed_experiment(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsonl"
    args = [
        "--scenario",
        "chat",
        "--window",
        "1200",
        "--turns",
        "17",
        "--json",
        "--archive",
        str(archive),
    ]
    result = CliRunner().invoke(demo_command, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == KEYS
    assert out["window"] == 1200 and out["turns"] == 17 and out["overflows"] == 0
    assert out["archive"] == str(archive) and archive.exists()
    assert out["max_request_tokens"] <= 1200
    assert 0 < len(out["compactions"]) < 5
    for c in out["compactions"]:
        assert set(c) == COMPACTION_KEYS and c["trigger"] == "context_pressure"
        assert c["tokens_after"] > out["floor_tokens"]  # whole request, floor included


def test_demo_resumes_an_existing_archive(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsonl"
    base = ["--scenario", "chat", "--json", "--archive", str(archive)]
    first = CliRunner().invoke(demo_command, [*base, "--turns", "5"])
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(demo_command, [*base, "--turns", "9", "--window", "99999"])
    assert second.exit_code == 0, second.output
    out = json.loads(second.stdout)
    assert out["turns"] == 9 and out["window"] == 1200  # the archive's settings win


def test_demo_html_writes_the_replay_page(tmp_path: Path) -> None:
    page = tmp_path / "demo.html"
    args = [
        "--scenario",
        "chat",
        "--turns",
        "8",
        "--archive",
        str(tmp_path / "a.jsonl"),
        "--html",
        str(page),
    ]
    result = CliRunner().invoke(demo_command, args)
    assert result.exit_code == 0, result.output
    assert "<html" in page.read_text(encoding="utf-8").lower()
    assert "compactions" in result.stdout


def test_demo_floor_error(tmp_path: Path) -> None:
    args = ["--window", "300", "--archive", str(tmp_path / "a.jsonl")]
    result = CliRunner().invoke(demo_command, args)
    assert isinstance(result.exception, PromptFloorExceeded)


def _openai_reply(text: str, prompt: int) -> Reply:
    return Reply(
        body={
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "qwen3-8b",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5},
        }
    )


@pytest.mark.parametrize("window", [8192])
def test_chat_reads_stdin_lines_against_a_local_server(tmp_path: Path, window: int) -> None:
    with FakeServer(_openai_reply("hello there", 40), _openai_reply("again", 60)) as server:
        args = [
            "--base-url",
            server.base_url,
            "--model",
            "qwen3-8b",
            "--window",
            str(window),
            "--max-output",
            "256",
            "--json",
            "--archive",
            str(tmp_path / "c.jsonl"),
        ]
        result = CliRunner().invoke(chat_command, args, input="hi\nand again\n")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["turns"] == 2 and out["window"] == window and out["max_request_tokens"] == 60


def test_chat_floor_error_before_any_request(tmp_path: Path) -> None:
    with FakeServer() as server:
        args = [
            "--base-url",
            server.base_url,
            "--model",
            "qwen3-8b",
            "--window",
            "1000",
            "--max-output",
            "4096",
            "--archive",
            str(tmp_path / "c.jsonl"),
        ]
        result = CliRunner().invoke(chat_command, args, input="hi\n")
        assert server.requests == []
    assert isinstance(result.exception, PromptFloorExceeded)
