"""What every adapter hands the guard reaches the archive as it was, a lone surrogate included
(a JSON "\\ud800" decodes to one; review: the guard's digest and the archive writer raised)."""

from __future__ import annotations

from pathlib import Path

from ctxbudget.compaction import load_archive
from ctxbudget.integrations._guard import ContextGuard
from ctxbudget.messages.model import Message, Request


def test_a_lone_surrogate_is_counted_and_archived_once(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    guard = ContextGuard(window=8_000, tokenizer="qwen3", archive=path)
    odd = Message(role="user", content="a lone \ud800 surrogate")
    messages = (odd, Message(role="assistant", content="Noted."))
    assert guard.counter.count(Request(messages=messages)).total > 0
    guard.observe(messages)
    guard.observe(messages)  # the adapters hand over whole lists: archived once
    assert guard.archive is not None
    guard.archive.close()
    assert load_archive(path).history == messages
