"""Per-session totals equal ccusage's (recorded from a real ccusage run, tests/data/ccusage)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import data_file

from ctxbudget.replay import load_trace

RECORDED = json.loads(data_file("ccusage", "totals.json").read_text("utf-8"))


def test_every_session_of_the_repo_has_a_recorded_total() -> None:
    recorded = {s["file"] for s in RECORDED["sessions"]}
    traces = {f"traces/{p.name}" for p in data_file("traces").glob("*.json*")}
    # ccusage has no mini-swe-agent reader (SOURCES.md there).
    assert traces - recorded == {"traces/mini-swe-agent_deepseek-chat_pydicom-901.traj.json"}
    assert RECORDED["ccusage"].startswith("ccusage ")


@pytest.mark.parametrize("session", RECORDED["sessions"], ids=lambda s: s["file"])
def test_totals_equal_ccusage(session: dict[str, Any]) -> None:
    calls = load_trace(data_file(*session["file"].split("/"))).calls
    cache_read = sum(c.cache_read_tokens for c in calls)
    cache_write = sum(c.cache_write_tokens for c in calls)
    ours = {
        "input": sum(c.context_tokens for c in calls) - cache_read - cache_write,
        "output": sum(c.output_tokens for c in calls),
        "cache_write": cache_write,
        "cache_read": cache_read,
        "calls": len(calls) if session["calls"] is not None else None,
    }
    assert ours == {k: session[k] for k in ours}
