"""Which files a corpus replays: each real file once, and a walk that always ends."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.replay.children import finish, start
from tests.replay.conftest import openai_pair

from ctxbudget.replay.corpus import find_sessions


def session(path: Path, prompt: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(openai_pair([{"role": "user", "content": "hi"}], prompt, 2) + "\n", "utf-8")
    return path


def replayed(*args: str, env: dict[str, str] | None = None) -> list[str]:
    """The sources ``ctxbudget replay ARGS --json`` replayed (in a child, with a timeout)."""
    child = start(["replay", *args, "--window", "1000", "--json"], env=env)
    code, out, err = finish(child)
    assert code == 0, err
    doc = json.loads(out)
    return [s["trace"]["source"] for s in doc.get("sessions", [doc])]  # one: its own document


@pytest.mark.parametrize("links", [1, 2])
def test_a_glob_does_not_follow_links_to_parent_folders(tmp_path: Path, links: int) -> None:
    # One link to "." repeated the session 41 times (until the path was too long); two made
    # the walk 2^40 paths long.
    session(tmp_path / "corpus" / "deep" / "s.jsonl")
    (tmp_path / "corpus" / "x").symlink_to(".")
    if links == 2:
        (tmp_path / "corpus" / "deep" / "y").symlink_to("..")
    assert replayed(str(tmp_path / "corpus" / "**" / "*.jsonl"), "--workers", "1") == [
        str(tmp_path / "corpus" / "deep" / "s.jsonl")
    ]


def test_the_same_file_named_twice_is_replayed_once(tmp_path: Path) -> None:
    one = session(tmp_path / "a" / "s.jsonl")
    session(tmp_path / "a" / "t.jsonl", prompt=20)
    relative = os.path.relpath(one)
    sources = replayed(relative, str(one), str(tmp_path / "a" / "*.jsonl"), "--workers", "1")
    assert sources == [relative, str(tmp_path / "a" / "t.jsonl")]


def test_scan_counts_a_linked_or_hard_linked_session_once(tmp_path: Path) -> None:
    pi = tmp_path / "pi" / "sessions"
    real = session(pi / "--repo--" / "s.jsonl")
    (pi / "--other--").mkdir()
    (pi / "--other--" / "link.jsonl").symlink_to(real)
    os.link(real, pi / "--other--" / "hard.jsonl")
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "CLAUDE_CONFIG_DIR": "",
        "CODEX_HOME": str(tmp_path / "none"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "pi"),
    }
    assert len(replayed("--scan", "--workers", "1", env=env)) == 1


def test_a_folder_with_a_link_loop_is_read_once(tmp_path: Path) -> None:
    session(tmp_path / "f" / "s.jsonl")
    (tmp_path / "f" / "loop").symlink_to(tmp_path / "f")
    (tmp_path / "f" / "self.jsonl").symlink_to("self.jsonl")  # a link loop: no file
    found, missing = find_sessions([str(tmp_path / "f"), str(tmp_path / "f" / "s.jsonl")])
    assert found == [tmp_path / "f" / "s.jsonl"] and missing == []
