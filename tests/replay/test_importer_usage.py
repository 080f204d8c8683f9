"""Importers read provider usage through budget/usage.py; the shared traces' numbers stay pinned."""

from __future__ import annotations

import hashlib

import pytest
from tests.replay.conftest import shared_trace

from ctxbudget.replay import load_trace

# sha256 over "context,output,reasoning,cache_read;" of every call, computed from the importers
# before they read usage through budget/usage.py: moving the arithmetic must not move a number.
PINNED = [
    ("claude-code", 17, "ab6ea000059c7e6a5101f5c4747cd70cc8a70552b881cbd2562de3e96a4de962"),
    ("codex", 169, "2c25e048c9a7abaac03712c42a56b01d50384e2d98913b50a2c2ea4ae0122629"),
    ("mini-swe-agent", 61, "ccfb43864ec76bc5b0826c81bb1e45dda174ed6ffc46ee9d1acf51929e1ddec6"),
    ("pi", 253, "30f359ef2b7d957d53491ae4ac0f182e789bbaf8ec394355b0dfc158d1da213e"),
]


@pytest.mark.parametrize(("fmt", "calls", "digest"), PINNED)
def test_shared_trace_numbers_are_pinned(fmt: str, calls: int, digest: str) -> None:
    trace = load_trace(shared_trace(fmt))
    h = hashlib.sha256()
    for c in trace.calls:
        numbers = (c.context_tokens, c.output_tokens, c.reasoning_tokens, c.cache_read_tokens)
        h.update(b"%d,%d,%d,%d;" % numbers)
    assert len(trace.calls) == calls
    assert h.hexdigest() == digest
