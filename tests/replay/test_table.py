"""`ctxbudget replay` terminal output: readable cells, 80 columns, the window hint."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner
from tests.replay.conftest import openai_pair, shared_trace

from ctxbudget.cli.replay import replay_command
from ctxbudget.replay.windows import known_window

RULES = ("opencode-input-limit", "letta", "pi", "opencode", "codex", "corecoder", "ctxbudget")
ALL_RULES = [arg for rule in RULES for arg in ("--policy", rule)]


def run(*args: str) -> str:
    result = CliRunner().invoke(
        replay_command, list(args), catch_exceptions=False, env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def doc(*args: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(run(*args, "--json"))
    return loaded


def rows(output: str, rule: str) -> list[list[str]]:
    """The cells of ``rule``'s rows in every rules table (the estimators table comes after)."""
    rules_part = output.split("estimators:")[0]
    return [
        [c.strip() for c in line.split("│")[1:-1]]
        for line in rules_part.splitlines()
        if line.startswith("│ ") and line.split("│")[1].strip() == rule
    ]


def test_header_reads_naturally() -> None:
    out = run(str(shared_trace("claude-code")))
    (model,) = re.findall(r"claude-sonnet-[\w-]+", out.splitlines()[0])
    window = known_window(model)
    assert window is not None
    assert f"window {window:,} (known window of {model})" in out
    assert "None" not in out


def test_fits_80_columns_with_whole_names() -> None:
    out = run(str(shared_trace("codex")), "--window", "44000", "--window", "30000", *ALL_RULES)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    assert rows(out, "opencode-input-limit")
    assert "before/after" in out and "task end" in out


def test_late_and_fires_match_json() -> None:
    args = (str(shared_trace("codex")), "--window", "30000", *ALL_RULES)
    out, report = run(*args), doc(*args)
    (window,) = report["windows"]  # type: ignore[misc]
    assert any(p["late"] for p in window["policies"])  # the case worth showing
    for p in window["policies"]:
        (cells,) = rows(out, p["name"])
        assert cells[4] == ("✗ late" if p["late"] else "no")
        assert cells[3] == ("never" if p["first_trigger"] is None else f"{p['first_trigger']:,}")
    assert "late: ✗" in out


def test_on_total_column_only_when_it_differs() -> None:
    for size in ("44000", "200000"):
        args = (str(shared_trace("codex")), "--window", size, *ALL_RULES)
        (window,) = doc(*args)["windows"]  # type: ignore[misc]
        differs = any(
            p["first_trigger_reading_total"] != p["first_trigger"] for p in window["policies"]
        )
        out = run(*args)
        assert ("on total" in out) == differs, size
        if differs:
            for p in window["policies"]:
                reading = p["first_trigger_reading_total"]
                assert rows(out, p["name"])[0][5] == ("never" if reading is None else str(reading))


def test_quiet_window_suggests_one_that_fires() -> None:
    trace = str(shared_trace("claude-code"))
    out = run(trace)
    match = re.search(r"no rule fires at this window: try --window (\d+)", out)
    assert match, out
    suggested = match.group(1)
    report = doc(trace, "--window", suggested)
    peak = max(c["context_tokens"] for c in report["calls"])  # type: ignore[attr-defined]
    assert 0.85 <= peak / int(suggested) <= 0.90
    (window,) = report["windows"]  # type: ignore[misc]
    assert any(p["first_trigger"] is not None for p in window["policies"])
    assert "try --window" not in run(trace, "--window", suggested)


def test_estimator_notes_explain_naive() -> None:
    out = run(str(shared_trace("mini-swe-agent")))
    assert "naive: the estimator over the messages only (no usage" in out


def test_model_name_is_not_markup(write_log: Callable[[list[str]], Path]) -> None:
    log = write_log([openai_pair([{"role": "user", "content": "hi"}], 900, 10, model="[red]x")])
    out = run(str(log), "--window", "1000")
    assert "[red]x" in out.splitlines()[0]
