"""Two gateway instances on one machine sharing one state file and one archive folder (the team
setup of issue 29 with a local store): a conversation whose requests alternate between them is
answered every time; each instance writes the conversation's records to its own archive file,
and every file reads back as an archive."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from starlette.testclient import TestClient
from tests.gateway.recording_upstream import TOKENIZER, Upstream

from ctxbudget.compaction.archive import load_archive
from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.config import GatewayConfig


def _instance(tmp_path: Path, upstream: Upstream) -> TestClient:
    config = GatewayConfig(
        upstream="http://upstream.invalid/v1",
        window=8_192,
        tokenizer=TOKENIZER,
        state=tmp_path / "state.sqlite3",
        archive_dir=tmp_path / "archives",
    )
    return TestClient(create_app(config, transport=httpx.ASGITransport(app=upstream.app())))


def test_two_instances_on_one_archive_folder_answer_every_request(tmp_path: Path) -> None:
    upstream = Upstream()
    with ExitStack() as stack:
        instances = [stack.enter_context(_instance(tmp_path, upstream)) for _ in range(2)]
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
        for turn in range(6):
            messages.append({"role": "user", "content": f"Question {turn}?"})
            reply = instances[turn % 2].post(
                "/v1/chat/completions", json={"model": "m", "messages": messages}
            )
            assert reply.status_code == 200, reply.text
            messages.append(reply.json()["choices"][0]["message"])
    archives = sorted((tmp_path / "archives").glob("*.jsonl"))
    assert len(archives) == 2  # one per instance, each its own writer
    histories = [load_archive(path) for path in archives]
    assert all(not state.warnings for state in histories)
    # Between them the two files hold every message the client sent.
    contents = {m.text for state in histories for m in state.history}
    assert {f"Question {turn}?" for turn in range(6)} <= contents
