"""Any file given to a session importer yields a Trace or a one-line ctxbudget error, nothing else.

``make fuzz`` runs these with the "fuzz" Hypothesis profile (10,000+ examples each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reliability_strategies import read_samples, session_bytes

from ctxbudget.errors import CtxbudgetError
from ctxbudget.replay.importers import detect_format, load_trace
from ctxbudget.replay.trace import FORMATS, Trace

pytestmark = pytest.mark.fuzz
formats = st.none() | st.sampled_from(FORMATS)


@pytest.fixture(scope="module")
def samples(traces_dir: Path) -> dict[str, list[Any]]:
    return read_samples(traces_dir)


@pytest.fixture(scope="module")
def session_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "session.jsonl"


def check_load(path: Path, fmt: str | None) -> Trace | None:
    """Load ``path``; a ctxbudget error is fine when its message is one line naming the file."""
    try:
        trace = load_trace(path, fmt)
    except CtxbudgetError as exc:
        text = str(exc)
        assert text.splitlines() == [text], repr(text)
        assert str(path) in text or (fmt is not None and fmt not in FORMATS), text
        return None
    assert isinstance(trace, Trace)
    assert trace.calls and all(c.context_tokens >= 0 for c in trace.calls)
    assert trace.format == (fmt or trace.format)
    return trace


@given(content=st.binary(max_size=2000), fmt=formats)
def test_arbitrary_bytes(session_path: Path, content: bytes, fmt: str | None) -> None:
    session_path.write_bytes(content)
    check_load(session_path, fmt)


@given(data=st.data(), fmt=formats)
def test_mutated_sessions(
    samples: dict[str, list[Any]], session_path: Path, data: st.DataObject, fmt: str | None
) -> None:
    session_path.write_bytes(data.draw(session_bytes(samples)))
    check_load(session_path, fmt)


@given(data=st.data())
def test_detect_format_agrees_with_load(
    samples: dict[str, list[Any]], session_path: Path, data: st.DataObject
) -> None:
    session_path.write_bytes(data.draw(session_bytes(samples)))
    try:
        detected = detect_format(session_path)
    except CtxbudgetError as exc:
        assert str(exc).splitlines() == [str(exc)]
        return
    trace = check_load(session_path, None)
    assert trace is None or trace.format == detected
