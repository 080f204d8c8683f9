"""Real clients on a loopback gateway: the official openai SDK (sync, async, streamed), and the
`ctxbudget serve` command itself, killed with SIGKILL mid-conversation and restarted."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import REPO, free_port
from tests.gateway.helpers import config, long_text, loopback, scripted, user

from ctxbudget.gateway.app import create_app
from ctxbudget.providers.mock import MockProvider


def _gateway_url(tmp_path: Path, window: int) -> Any:
    app, upstream = scripted(MockProvider("chat", window=window))
    gateway_app = create_app(
        config(tmp_path, window=window), transport=httpx.ASGITransport(app=app)
    )
    return loopback(gateway_app), upstream, gateway_app.state.gateway


def test_the_openai_sdk_sync_and_streamed(tmp_path: Path) -> None:
    server, _, gw = _gateway_url(tmp_path, 2048)
    with server as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        messages: list[Any] = [{"role": "system", "content": "Be brief."}]
        for turn in range(1, 13):
            messages.append(user(long_text(f"topic {turn}", 30)))
            if turn % 2:
                reply = client.chat.completions.create(model="mock", messages=messages)
                content = reply.choices[0].message.content
                assert reply.usage is not None and reply.usage.prompt_tokens < 2048
            else:
                stream = client.chat.completions.create(
                    model="mock", messages=messages, stream=True
                )
                chunks = list(stream)
                assert all(c.usage is None for c in chunks)  # the added usage chunk is not seen
                content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert f"topic {turn}" in (content or "")
            messages.append({"role": "assistant", "content": content})
        raw = client.chat.completions.with_raw_response.create(model="mock", messages=messages)
        assert raw.headers["x-ctxbudget-compacted"] == "1"
    assert gw.summary_calls >= 1


def test_the_openai_sdk_async(tmp_path: Path) -> None:
    server, _, _ = _gateway_url(tmp_path, 4096)
    with server as url:

        async def go() -> list[str]:
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            replies = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model="mock", messages=[user(f"topic {k}: hello")]
                    )
                    for k in range(1, 6)
                )
            )
            stream = await client.chat.completions.create(
                model="mock", messages=[user("topic 9: hi")], stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            await client.close()
            return [r.choices[0].message.content or "" for r in replies] + [text]

        got = asyncio.run(go())
    assert [f"topic {k}" in text for k, text in zip([1, 2, 3, 4, 5, 9], got, strict=True)] == [
        True
    ] * 6


def _serve(state: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "ctxbudget.cli.main", "serve", "--upstream", "mock"]
    command += ["--window", "2048", "--tokenizer", "qwen3", "--state", str(state)]
    command += ["--port", str(port)]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            httpx.get(f"http://127.0.0.1:{port}/ctxbudget/status", timeout=1)
            return process
        except httpx.TransportError:
            assert time.monotonic() < deadline, "ctxbudget serve did not start"
            time.sleep(0.1)


@pytest.mark.reliability
def test_kill_9_mid_conversation_then_restart_reuses_the_compaction(tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite3"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = _serve(state, port)
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    try:
        for turn in range(1, 10):
            messages.append(user(long_text(f"kill topic {turn}", 30)))
            reply = httpx.post(
                f"{url}/v1/chat/completions", json={"model": "mock", "messages": messages}
            )
            assert reply.status_code == 200, reply.text
            messages.append(reply.json()["choices"][0]["message"])
        assert httpx.get(f"{url}/ctxbudget/status").json()["summary_calls"] >= 1
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    process = _serve(state, port)
    try:
        messages.append(user("kill topic 10: one more"))
        reply = httpx.post(
            f"{url}/v1/chat/completions", json={"model": "mock", "messages": messages}, timeout=60
        )
        status = httpx.get(f"{url}/ctxbudget/status").json()
    finally:
        process.terminate()
        process.wait(10)
    assert reply.status_code == 200
    assert reply.headers["x-ctxbudget-compacted"] == "1"
    assert int(reply.headers["x-ctxbudget-tokens"]) < 2048
    assert status["summary_calls"] == 0  # the stored compaction was reused


def test_serve_refuses_a_public_bind_without_a_client_key() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "ctxbudget.cli.main", "serve", "--upstream", "mock"]
    done = subprocess.run(
        [*command, "--host", "0.0.0.0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "--api-key-env" in done.stderr and "Traceback" not in done.stderr


def test_serve_without_its_extra_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from ctxbudget.cli.main import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name)
    )
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--upstream", "mock"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "uvicorn" in err and "pip install 'ctxbudget[serve]'" in err
