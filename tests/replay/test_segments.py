"""Recorded compactions cut a session into segments; windows follow each call's model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.replay.conftest import char_estimator

from ctxbudget.replay import replay_file, result_json

EST = {"chars4": char_estimator}


def pi_session(tmp_path: Path, calls: list[tuple[int, int, str]], compact_before: set[int]) -> Path:
    """A Pi session: one user task, then (context, output, model) per call, with a compaction
    entry before each call in ``compact_before``."""
    lines: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "s"}]
    lines.append(
        {"type": "message", "parentId": None, "message": {"role": "user", "content": "go"}}
    )
    for i, (context, output, model) in enumerate(calls):
        if i in compact_before:
            lines.append({"type": "compaction", "summary": "so far", "tokensBefore": context})
        usage = {"input": context, "output": output, "cacheRead": 0, "cacheWrite": 0}
        message = {"role": "assistant", "content": "ok", "usage": usage, "model": model}
        lines.append({"type": "message", "parentId": "p", "message": message})
        result = {"role": "toolResult", "content": "r"}
        lines.append({"type": "message", "parentId": "p", "message": result})
    path = tmp_path / "pi.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    return path


def climb(start: int, step: int, n: int) -> list[int]:
    return [start + step * k for k in range(n)]


def policy(doc: dict[str, Any], name: str, window: int = 0) -> dict[str, Any]:
    return next(p for p in doc["windows"][window]["policies"] if p["name"] == name)


def test_each_segment_gets_its_own_fire_and_wall(tmp_path: Path) -> None:
    # Three segments climbing to 95K, 98K and 99K of a 100K window, cut by two compactions.
    contexts = climb(10_000, 5_000, 18) + climb(20_000, 6_000, 14) + climb(30_000, 7_000, 10)
    outputs = [500] * len(contexts)
    outputs[len(contexts) - 1] = 8_000  # the last call's reply crosses the window
    calls = [(c, o, "glm-4.6") for c, o in zip(contexts, outputs, strict=True)]
    path = pi_session(tmp_path, calls, {18, 32})
    doc = result_json(replay_file(path, windows=[100_000], estimators=EST))
    assert doc["trace"]["recorded_compactions"] == [18, 32]
    assert [c["after_compaction"] for c in doc["calls"]].count(True) == 2
    assert doc["windows"][0]["walls"] == [None, None, 41]
    letta = policy(doc, "letta")  # line 100,000 - 16,384 = 83,616
    assert letta["segments"] == 3
    assert letta["fires"] == [15, 18 + 11, 32 + 8]
    assert letta["first_trigger"] == 15 and letta["late"] is False  # kept as they were
    assert letta["late_segments"] == 0
    fills = [85_000, 86_000, 86_000]
    assert abs(letta["mean_fill_at_fire"] - sum(fills) / 3 / 100_000) < 1e-12
    pi = policy(doc, "pi")  # checks only at a task's end: one task, so it never fires
    assert pi["fires"] == [None, None, None] and pi["late_segments"] == 1


def test_a_rule_that_fired_before_the_harness_compacted_is_judged_again(tmp_path: Path) -> None:
    # The case: a rule fires early in segment 1 and the harness compacts; in segment 2
    # the wall comes first. Judged on the first trigger only it read "fine".
    contexts = [50_000, 90_000, 10_000, 60_000, 85_000]
    outputs = [100, 100, 100, 100, 13_000]
    calls = [(c, o, "glm-4.6") for c, o in zip(contexts, outputs, strict=True)]
    doc = result_json(replay_file(pi_session(tmp_path, calls, {2}), windows=[97_050]))
    assert doc["windows"][0]["walls"] == [None, 4]
    codex = policy(doc, "codex")  # 90% of 97,050 = 87,345
    assert codex["first_trigger"] == 1 and codex["late"] is False  # as before: "fine"
    assert codex["fires"] == [1, None] and codex["late_segments"] == 1


def test_window_and_wall_follow_each_calls_model(tmp_path: Path) -> None:
    # glm-4.5: 128K, glm-4.6: 200K (windows.py). 150K + 1K is over the first, not the second.
    calls = [(20_000, 100, "glm-4.6"), (150_000, 1_000, "glm-4.6"), (150_000, 1_000, "glm-4.5")]
    doc = result_json(replay_file(pi_session(tmp_path, calls, set()), estimators=EST))
    assert [c["model"] for c in doc["calls"]] == ["glm-4.6", "glm-4.6", "glm-4.5"]
    window = doc["windows"][0]
    assert window["window_by_model"] == {"glm-4.6": 200_000, "glm-4.5": 128_000}
    assert doc["trace"]["window_source"] == "known window of each call's model"
    assert window["wall"] == 2
    assert policy(doc, "codex")["fires"] == [2]  # 150K < 90% of 200K; >= 90% of 128K


def test_a_given_window_applies_to_every_call(tmp_path: Path) -> None:
    calls = [(20_000, 100, "glm-4.6"), (150_000, 1_000, "glm-4.5")]
    doc = result_json(replay_file(pi_session(tmp_path, calls, set()), windows=[300_000]))
    assert doc["windows"][0]["window_by_model"] is None
    assert doc["windows"][0]["wall"] is None
