"""Two gateway instances on one machine sharing one state file and one archive folder (the team
setup of issue 29 with a local store): a conversation whose requests alternate between them is
answered every time; each instance writes the conversation's records to its own archive file,
and every file reads back as an archive."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from starlette.testclient import TestClient
from tests.gateway.recording_upstream import TOKENIZER, Upstream

from ctxbudget.cli.main import cli
from ctxbudget.compaction.archive import Archive, load_archive
from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.messages.model import Message


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
    # `ctxbudget replay FOLDER` reads both files, each a session of its own.
    result = CliRunner().invoke(
        cli,
        ["replay", str(tmp_path / "archives"), "--window", "8192", "--workers", "1", "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    sessions = json.loads(result.stdout)["sessions"]
    assert len(sessions) == 2


def test_a_request_fsyncs_its_archive_once(tmp_path: Path, monkeypatch: Any) -> None:
    """A new 40-message conversation is archived with one fsync (was one per record), made
    before the state is saved; the records were already in the file."""
    import ctxbudget.compaction.archive as archive_module

    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(archive_module.os, "fsync", counting_fsync)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in range(20):
        messages += [
            {"role": "user", "content": f"Question {turn}?"},
            {"role": "assistant", "content": f"Answer {turn}."},
        ]
    messages.append({"role": "user", "content": "Last question?"})
    with _instance(tmp_path, Upstream()) as client:
        reply = client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
        assert reply.status_code == 200, reply.text
        assert len(synced) == 1
        (path,) = (tmp_path / "archives").glob("*.jsonl")
        assert len(load_archive(path).history) == len(messages) - 1  # the system is not one
        assert len(load_archive(path).usage) == 1


def test_deferred_archive_writes_at_once_and_syncs_on_demand(
    tmp_path: Path, monkeypatch: Any
) -> None:
    import ctxbudget.compaction.archive as archive_module

    synced: list[int] = []
    monkeypatch.setattr(archive_module.os, "fsync", synced.append)
    path = tmp_path / "a.jsonl"
    archive = Archive(path, sync_each_record=False)
    archive.append_message(Message(role="user", content="one"))
    archive.append_message(Message(role="user", content="two"))
    assert [m.text for m in load_archive(path).history] == ["one", "two"]  # written already
    assert synced == []
    archive.sync()
    archive.sync()  # nothing new: no second fsync
    assert len(synced) == 1
    archive.append_message(Message(role="user", content="three"))
    archive.close()  # fsyncs what is left
    assert len(synced) == 2
    with Archive(path) as each:  # the default: every record on its own
        each.append_message(Message(role="user", content="four"))
        each.append_message(Message(role="user", content="five"))
    assert len(synced) == 4
