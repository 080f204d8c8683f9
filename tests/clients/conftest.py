"""Fixtures of the real-clients tier: the scripted upstream, its task files, the gateway."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.gateway.scripted_upstream import ScriptedUpstream, write_task_files

STEPS = 30
# The upstream's window per client: its first request plus about eight of the thirty steps
# (each step adds ~1,480 tokens of tool output), so a client alone overflows around step 8-9.
# First requests measured on the pinned versions (o200k_base + overhead, the upstream's count):
# Pi 1,438, Codex 8,522, Claude Code 11,626, OpenCode 7,072.
WINDOW = {"pi": 13_000, "codex": 20_000, "claude": 23_000, "opencode": 19_000}
# What each client is told the window is (the gateway stands between it and the real one).
DECLARED_WINDOW = 131_072


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    """The thirty files the scripted task prints, in the run's own folder."""
    folder = tmp_path / "task"
    write_task_files(folder, STEPS)
    return folder


def scripted(window: int, task_dir: Path) -> ScriptedUpstream:
    """A scripted upstream with the tier's step count (start it with ``with``)."""
    return ScriptedUpstream(window=window, task_dir=task_dir, steps=STEPS)


@pytest.fixture
def upstream_for(task_dir: Path) -> Iterator[dict[str, ScriptedUpstream]]:
    """``upstream_for[client]`` starts (once) the upstream sized for that client."""
    started: dict[str, ScriptedUpstream] = {}

    class Lazy(dict[str, ScriptedUpstream]):
        def __missing__(self, client: str) -> ScriptedUpstream:
            up = scripted(WINDOW[client], task_dir).start()
            started[client] = up
            self[client] = up
            return up

    yield Lazy()
    for up in started.values():
        up.stop()
