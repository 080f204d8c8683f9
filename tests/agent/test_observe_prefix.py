"""`BudgetSession.observe` digests only what a resent list adds: an agent (the gateway's
clients) resends its whole conversation each step, and digesting every message each time cost
more than anything else on the gateway's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ctxbudget.agent.budget_session as budget_session
from ctxbudget.agent.budget_session import BudgetSession, SessionState
from ctxbudget.compaction.archive import Archive, load_archive
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Message


def _conversation(n: int) -> list[Message]:
    return [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}")
        for i in range(n)
    ]


def test_a_resent_list_is_digested_from_where_it_grows(tmp_path: Path, monkeypatch: Any) -> None:
    digested: list[Message] = []
    real_digest = budget_session._digest

    def counting_digest(message: Message) -> str:
        digested.append(message)
        return real_digest(message)

    monkeypatch.setattr(budget_session, "_digest", counting_digest)
    archive = Archive(tmp_path / "a.jsonl")
    session = BudgetSession(window=8_192, counter=RequestCounter("o200k_base"), archive=archive)
    messages = _conversation(100)
    session.observe(messages)
    assert len(digested) == 100
    # The same list read again (new objects, equal values) plus two messages: two digests.
    grown = [Message(role=m.role, content=m.text) for m in messages] + _conversation(102)[100:]
    session.observe(grown)
    assert len(digested) == 102
    # An edited list is digested from the edit on; nothing is archived twice.
    edited = [*grown[:50], Message(role="user", content="edited"), *grown[51:]]
    session.observe(edited)
    assert len(digested) == 102 + 52
    # A state applied from elsewhere may list other messages as archived: all digested again.
    session.apply(SessionState(window=8_192, archived=frozenset()))
    session.observe(edited)
    assert len(digested) == 102 + 52 + 102
    archive.close()
    texts = [m.text for m in load_archive(tmp_path / "a.jsonl").history]
    assert texts[:103] == [f"message {i}" for i in range(102)] + ["edited"]
