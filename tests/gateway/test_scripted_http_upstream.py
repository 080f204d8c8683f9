"""The scripted HTTP upstream itself: its overflow errors are the real ones, its script, usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import data_file

from ctxbudget.providers.overflow import classify_error

from .scripted_http_upstream import (
    FINAL_ANSWER,
    ScriptedUpstream,
    overflow_error,
    prompt_tokens,
    write_task_files,
)

CORPUS = [
    json.loads(line)
    for line in data_file("overflow", "corpus.jsonl").read_text(encoding="utf-8").splitlines()
]


def _corpus(row_id: str) -> dict[str, Any]:
    return next(row for row in CORPUS if row["id"] == row_id)


@pytest.mark.parametrize(
    ("api", "row_id", "states_window"),
    [("chat", "c045", True), ("responses", "c091", False), ("messages", "c072", True)],
)
def test_each_overflow_error_is_the_real_body_and_classifies_as_overflow(
    api: Any, row_id: str, states_window: bool
) -> None:
    status, body = overflow_error(api, 4476, 4096)
    text = json.dumps(body)
    error = classify_error(status, text)
    assert error is not None and error.limit == (4096 if states_window else None)
    # The message is the corpus line's (same numbers where the line has them).
    message = body["error"]["message"]
    row = _corpus(row_id)["message"]
    assert message in row or message.replace("4476", "208310").replace("4096", "200000") in row


def _chat_tools() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"command": {"type": "string"}}}
    return [{"type": "function", "function": {"name": "bash", "parameters": schema}}]


def test_the_script_asks_for_each_step_then_answers(tmp_path: Path) -> None:
    write_task_files(tmp_path, 3)
    with ScriptedUpstream(window=100_000, task_dir=tmp_path, steps=3) as up:
        client = httpx.Client(base_url=up.url)
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "go"}],
            "tools": _chat_tools(),
        }
        commands = []
        for _ in range(3):
            reply = client.post("/v1/chat/completions", json=body).json()
            call = reply["choices"][0]["message"]["tool_calls"][0]
            commands.append(json.loads(call["function"]["arguments"])["command"])
            assert reply["usage"]["prompt_tokens"] == prompt_tokens(body)
        final = client.post("/v1/chat/completions", json=body).json()
    assert commands == [f"cat {tmp_path / f'task_0{n}.txt'}" for n in (1, 2, 3)]
    assert final["choices"][0]["message"]["content"] == FINAL_ANSWER
    assert [s.reply for s in up.seen] == ["tool", "tool", "tool", "final"]


def test_a_summary_request_gets_text_and_is_not_a_step(tmp_path: Path) -> None:
    ask = {"role": "user", "content": "Please write a summary of the conversation."}
    with ScriptedUpstream(window=100_000, task_dir=tmp_path) as up:
        reply = httpx.post(
            f"{up.url}/v1/messages",
            json={"messages": [ask], "tools": [{"name": "Bash", "input_schema": {}}]},
        ).json()
    assert reply["content"][0]["type"] == "text" and "<summary>" in reply["content"][0]["text"]
    assert up.steps_served == 0


def test_a_prompt_over_the_window_is_refused_and_the_window_is_discoverable(tmp_path: Path) -> None:
    big = {"messages": [{"role": "user", "content": "word " * 3000}], "stream": True}
    with ScriptedUpstream(window=2000, task_dir=tmp_path) as up:
        props = httpx.get(f"{up.url}/props").json()
        models = httpx.get(f"{up.url}/v1/models").json()
        refused = httpx.post(f"{up.url}/v1/responses", json={**big, "input": big["messages"]})
        counted = httpx.post(f"{up.url}/v1/messages/count_tokens", json=big).json()
    assert props["default_generation_settings"]["n_ctx"] == 2000
    assert models["data"][0]["max_model_len"] == 2000
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    assert counted["input_tokens"] > 2000
    assert [s.reply for s in up.seen] == ["overflow", "count"]


def _sse(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def test_streams_carry_usage_as_each_api_does(tmp_path: Path) -> None:
    ask = [{"role": "user", "content": "go"}]
    with ScriptedUpstream(window=100_000, task_dir=tmp_path, steps=0) as up:
        chat = httpx.post(
            f"{up.url}/v1/chat/completions",
            json={
                "messages": ask,
                "tools": _chat_tools(),
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        responses = httpx.post(
            f"{up.url}/v1/responses",
            json={"input": ask, "tools": [{"type": "function", "name": "shell"}], "stream": True},
        )
        messages = httpx.post(
            f"{up.url}/v1/messages",
            json={"messages": ask, "tools": [{"name": "Bash"}], "stream": True},
        )
    chat_events = _sse(chat.text)
    assert chat_events[-1]["usage"]["prompt_tokens"] > 0 and chat_events[-1]["choices"] == []
    assert (
        "".join(e["choices"][0]["delta"].get("content") or "" for e in chat_events[:-1])
        == FINAL_ANSWER
    )
    completed = _sse(responses.text)[-1]
    assert completed["type"] == "response.completed"
    assert completed["response"]["usage"]["input_tokens"] > 0
    assert completed["response"]["output"][0]["content"][0]["text"] == FINAL_ANSWER
    events = _sse(messages.text)
    assert events[0]["message"]["usage"]["input_tokens"] > 0
    assert events[-2]["type"] == "message_delta" and events[-2]["usage"]["output_tokens"] > 0


def test_an_advertised_window_is_stated_but_the_real_one_enforced(tmp_path: Path) -> None:
    body = {"messages": [{"role": "user", "content": "word " * 3000}]}
    with ScriptedUpstream(window=2000, advertised_window=8000, task_dir=tmp_path) as up:
        props = httpx.get(f"{up.url}/props").json()
        refused = httpx.post(f"{up.url}/v1/chat/completions", json=body).json()
    assert props["default_generation_settings"]["n_ctx"] == 8000
    assert refused["error"]["n_ctx"] == 2000
