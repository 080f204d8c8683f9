"""``ctxbudget thresholds``: the seed's table, its JSON contract, the plot and bad windows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ctxbudget.budget.rules import POLICY_NAMES
from ctxbudget.cli.thresholds import parse_window, thresholds_command
from ctxbudget.errors import InvalidWindowError

SEED_WINDOWS = ("40960", "200000", "1000000")


def run_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(thresholds_command, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data


def policy(data: dict[str, Any], window: int, name: str) -> dict[str, Any]:
    [entry] = [w for w in data["windows"] if w["window"] == window]
    rows: list[dict[str, Any]] = [p for p in entry["policies"] if p["name"] == name]
    assert len(rows) == 1
    return rows[0]


def test_json_contract_lists_every_policy_per_window() -> None:
    data = run_json(*(f"--window={w}" for w in SEED_WINDOWS))
    assert [w["window"] for w in data["windows"]] == [int(w) for w in SEED_WINDOWS]
    for entry in data["windows"]:
        assert [p["name"] for p in entry["policies"]] == list(POLICY_NAMES)
        for row in entry["policies"]:
            assert {"name", "threshold", "percent", "checked"} <= set(row)
            assert isinstance(row["threshold"], int)
            assert isinstance(row["checked"], list) and row["checked"]


@pytest.mark.parametrize(
    ("window", "name", "percent"),
    [
        (40_960, "pi", 60.0),
        (200_000, "pi", 91.8),
        (1_000_000, "pi", 98.4),
        (40_960, "opencode", 21.9),
        (200_000, "opencode", 84.0),
        (1_000_000, "opencode", 96.8),
        (40_960, "opencode-input-limit", 51.2),
        (200_000, "opencode-input-limit", 90.0),
        (1_000_000, "opencode-input-limit", 98.0),
        (40_960, "codex", 90.0),
        (1_000_000, "corecoder", 50.0),
    ],
)
def test_seed_table_numbers_appear(window: int, name: str, percent: float) -> None:
    data = run_json(*(f"--window={w}" for w in SEED_WINDOWS))
    assert policy(data, window, name)["percent"] == percent


def test_letta_threshold_appears() -> None:
    assert policy(run_json("--window", "200000"), 200_000, "letta")["threshold"] == 183_616


def test_corecoder_tiers_listed_and_threshold_is_the_first() -> None:
    row = policy(run_json("--window", "40960"), 40_960, "corecoder")
    assert row["threshold"] == row["tiers"][0]
    assert [round(100 * t / 40_960) for t in row["tiers"]] == [50, 70, 90]
    assert "tiers" not in policy(run_json("--window", "40960"), 40_960, "pi")


def test_window_2400_says_who_compacts_before_every_request() -> None:
    data = run_json("--window", "2400")
    every = {p["name"] for p in data["windows"][0]["policies"] if p["compacts_every_request"]}
    assert {"pi", "opencode", "opencode-input-limit"} <= every
    assert not every & {"letta", "codex", "corecoder"}
    assert policy(data, 2_400, "pi")["threshold"] == 2_400 - 16_384
    # ctxbudget's default reserves shrink with the window: 600 reply + 150 compaction.
    assert policy(data, 2_400, "ctxbudget")["threshold"] == 2_400 - 600 - 150
    assert "ctxbudget" not in every
    # With a reply limit the window cannot hold, it is the prompt-floor case instead.
    data = run_json("--window", "2400", "--max-output", "4096")
    assert "PromptFloorExceeded" in policy(data, 2_400, "ctxbudget")["note"]


def test_window_2400_table_names_them() -> None:
    result = CliRunner().invoke(thresholds_command, ["--window", "2400"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "over the line before the first request: pi, opencode" in result.output
    args = ["--window", "2400", "--max-output", "4096"]
    result = CliRunner().invoke(thresholds_command, args, catch_exceptions=False)
    assert "ctxbudget:" in result.output


def test_table_shows_the_seed_numbers() -> None:
    args = [f"--window={w}" for w in SEED_WINDOWS]
    result = CliRunner().invoke(
        thresholds_command, args, catch_exceptions=False, terminal_width=200
    )
    assert result.exit_code == 0
    for text in ("60.0%", "91.8%", "98.4%", "21.9%", "84.0%", "96.8%", "51.2%", "90.0%"):
        assert text in result.output
    assert "50/70/90%" in result.output


def test_max_output_and_reserve_overrides() -> None:
    data = run_json("--window", "100000", "--max-output", "384", "--reserve", "10000")
    assert policy(data, 100_000, "pi")["threshold"] == 90_000
    assert policy(data, 100_000, "opencode")["threshold"] == 100_000 - 384
    assert policy(data, 100_000, "ctxbudget")["threshold"] == 100_000 - 384 - 2_048


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "lines.png"
    run_json("--window", "200000", "--plot", str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


@pytest.mark.parametrize("window", ["0", "-5", "nan", "abc", "1.5", ""])
def test_invalid_window_raises_invalid_window_error(window: str) -> None:
    result = CliRunner().invoke(thresholds_command, ["--window", window])
    assert isinstance(result.exception, InvalidWindowError)
    assert "\n" not in str(result.exception)


def test_parse_window_accepts_separators() -> None:
    assert parse_window("200,000") == parse_window("200_000") == 200_000
