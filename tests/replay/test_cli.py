"""`ctxbudget replay`: the JSON contract, the plot, the HTML file and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.replay.conftest import shared_trace

from ctxbudget.cli.replay import replay_command
from ctxbudget.errors import CtxbudgetError


def run(*args: str) -> str:
    result = CliRunner().invoke(replay_command, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_json_contract() -> None:
    doc = json.loads(run(str(shared_trace("codex")), "--json", "--window", "50000"))
    assert set(doc) >= {"trace", "calls", "windows", "estimators"}
    assert {"format", "calls", "model", "window", "skipped_lines"} <= set(doc["trace"])
    assert doc["trace"]["format"] == "codex" and doc["trace"]["calls"] == 169
    assert set(doc["calls"][0]) >= {
        "index",
        "context_tokens",
        "output_tokens",
        "reasoning_tokens",
        "cache_read_tokens",
        "task_start",
    }
    (window,) = doc["windows"]
    assert window["window"] == 50_000 and isinstance(window["wall"], int)
    names = [p["name"] for p in window["policies"]]
    assert names == ["letta", "pi", "opencode", "codex", "corecoder", "ctxbudget"]
    for p in window["policies"]:
        assert {"name", "checked", "first_trigger", "late"} <= set(p)
    for e in doc["estimators"]:
        assert {"name", "median_abs_error_pct", "p95_abs_error_pct"} <= set(e)
        assert e["median_abs_error_pct"] <= e["p95_abs_error_pct"]


def test_param_override_moves_pi() -> None:
    base = json.loads(
        run(str(shared_trace("codex")), "--json", "--window", "100000", "--policy", "pi")
    )
    tight = json.loads(
        run(
            str(shared_trace("codex")),
            "--json",
            "--window",
            "100000",
            "--policy",
            "pi",
            "--param",
            "pi.reserve_tokens=60000",
        )
    )
    assert (
        tight["windows"][0]["policies"][0]["first_trigger"]
        < base["windows"][0]["policies"][0]["first_trigger"]
    )


def test_plot_and_html(tmp_path: Path) -> None:
    png, html = tmp_path / "r.png", tmp_path / "r.html"
    run(str(shared_trace("mini-swe-agent")), "--plot", str(png), "--html", str(html))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "replay-data" in html.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--param", "pi.nope=1"], "no parameter"),
        (["--param", "pi"], "RULE.NAME=VALUE"),
        (["--policy", "nosuch"], "unknown policy"),
        (["--window", "0"], "positive"),
    ],
)
def test_bad_arguments_are_ctxbudget_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(replay_command, [str(shared_trace("pi")), *args])
    assert isinstance(result.exception, CtxbudgetError)
    assert message in str(result.exception)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_draws_every_window(tmp_path: Path) -> None:
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    trace = str(shared_trace("codex"))
    run(trace, "--window", "60000", "--plot", str(one))
    run(trace, "--window", "60000", "--window", "30000", "--plot", str(two))
    (w1, h1), (w2, h2) = png_size(one), png_size(two)
    assert w2 > 1.4 * w1 and h2 == h1  # a second column of panels, same rows
