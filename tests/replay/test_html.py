"""The HTML page: escaping, and in headless Chromium the self-check, the slider and inertness."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.replay.conftest import char_estimator, openai_pair, shared_trace

from ctxbudget.replay import load_trace, replay_file, replay_trace, write_html
from ctxbudget.replay.html import json_for_script, render_html

EST = {"chars4": char_estimator}
PAYLOADS = [
    "<script>window.__pwned = 1; alert(1)</script>",
    "</script><script>window.__pwned = 2</script>",
    '"><img src=x onerror="window.__pwned = 3">',
    "javascript:window.__pwned = 4",
    "<!-- <script>window.__pwned = 5</script>",
    "line\u2028separator\u2029and & ampersand",
]


def test_json_for_script_escapes_markup() -> None:
    text = json_for_script({"t": "</script><b>&\u2028\u2029"})
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in text
    assert json.loads(text) == {"t": "</script><b>&\u2028\u2029"}


def hostile_log(write_log: Callable[[list[str]], Path]) -> Path:
    history: list[dict[str, Any]] = []
    lines = []
    for i, payload in enumerate(PAYLOADS):
        history.append({"role": "user", "content": payload})
        lines.append(openai_pair(list(history), 1_000 * (i + 1), 50, reply=payload, model=payload))
        history.append({"role": "assistant", "content": payload})
    return write_log(lines)


def test_rendered_page_holds_no_raw_payload(write_log: Callable[[list[str]], Path]) -> None:
    page = render_html(replay_file(hostile_log(write_log), windows=[8_000], estimators=EST))
    assert page.count("<script") == 2  # the data block and our own script, nothing else
    assert "onerror=" not in page.replace('onerror=\\"', "")
    assert "<img" not in page


# --- headless Chromium -------------------------------------------------------------------


def open_page(browser: Any, path: Path) -> None:
    browser.get(path.resolve().as_uri())


def badge(browser: Any) -> tuple[str, str]:
    el = browser.find_element("id", "selfcheck")
    return el.get_attribute("data-status"), el.text


@pytest.mark.browser
@pytest.mark.parametrize("fmt", ["pi", "codex", "claude-code", "mini-swe-agent"])
def test_self_check_passes_on_shared_traces(browser: Any, tmp_path: Path, fmt: str) -> None:
    # Several windows, so that rules fire and the wall is hit somewhere.
    result = replay_file(shared_trace(fmt), windows=[30_000, 100_000, 400_000], estimators=EST)
    page = write_html(result, tmp_path / "replay.html")
    open_page(browser, page)
    status, text = badge(browser)
    assert status == "passed", text


@pytest.mark.browser
def test_self_check_reports_a_difference(browser: Any, tmp_path: Path) -> None:
    result = replay_file(shared_trace("pi"), windows=[100_000], estimators=EST)
    page = tmp_path / "bad.html"
    page.write_text(render_html(result).replace('"wall":', '"wall":7,"x":', 1), encoding="utf-8")
    open_page(browser, page)
    status, text = badge(browser)
    assert status == "failed"
    assert "wall" in text


@pytest.mark.browser
def test_slider_moves_trigger_markers(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    result = replay_file(shared_trace("pi"), windows=[400_000], estimators=EST)
    open_page(browser, write_html(result, tmp_path / "pi.html"))
    marker = browser.find_element("id", "trigger-corecoder")
    before = (marker.get_attribute("data-call"), marker.get_attribute("x1"))
    browser.find_element("id", "window-slider").send_keys(Keys.HOME)  # the smallest window
    after = browser.find_element("id", "trigger-corecoder")
    assert (after.get_attribute("data-call"), after.get_attribute("x1")) != before
    assert int(after.get_attribute("data-call")) < int(before[0])
    assert "wall: call" in browser.find_element("id", "wall-info").text


@pytest.mark.browser
def test_parameter_input_recomputes(browser: Any, tmp_path: Path) -> None:
    trace = load_trace(shared_trace("codex"))
    result = replay_trace(trace, windows=[200_000], estimators=EST)
    open_page(browser, write_html(result, tmp_path / "codex.html"))
    assert not browser.find_elements("id", "trigger-pi")  # never fires at 200K
    box = browser.find_element("id", "param-pi-reserve_tokens")
    box.clear()
    box.send_keys("190000")
    assert browser.find_element("id", "trigger-pi").get_attribute("data-call") is not None


@pytest.mark.browser
def test_hostile_trace_text_runs_no_script(
    browser: Any, tmp_path: Path, write_log: Callable[[list[str]], Path]
) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    result = replay_file(hostile_log(write_log), windows=[8_000], estimators=EST)
    open_page(browser, write_html(result, tmp_path / "hostile.html"))
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.execute_script("return document.images.length") == 0
    assert badge(browser)[0] == "passed"
    # The text is shown as text: the model name and the tooltips hold it literally.
    assert "<script>window.__pwned" in browser.find_element("id", "trace-info").text
    titles = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg title')).map(t => t.textContent)"
    )
    assert any(PAYLOADS[0] in t for t in titles)


def summary_rows(browser: Any) -> list[list[str]]:
    rows = browser.find_elements("css selector", "#summary-rows tr")
    return [[td.text for td in row.find_elements("css selector", "td")] for row in rows]


@pytest.mark.browser
def test_every_replayed_window_is_reachable(browser: Any, tmp_path: Path) -> None:
    result = replay_file(shared_trace("pi"), windows=[380_000, 100_000, 30_000], estimators=EST)
    open_page(browser, write_html(result, tmp_path / "windows.html"))
    buttons = browser.find_elements("css selector", "#window-choices button")
    assert [b.text for b in buttons] == [f"{w.window:,}" for w in result.windows]
    for button, replayed in zip(buttons, result.windows, strict=True):
        button.click()
        assert browser.find_element("id", "window-input").get_attribute("value") == (
            f"{replayed.window:,}"
        )
        wall = browser.find_element("id", "wall-info").text
        assert wall == (
            "wall: never hit" if replayed.wall is None else f"wall: call {replayed.wall:,}"
        )
        shown = summary_rows(browser)
        for row, p in zip(shown, replayed.policies, strict=True):
            fires = "never" if p.first_trigger is None else f"call {p.first_trigger:,}"
            assert row[0] == p.name
            assert row[2:5] == [f"{p.threshold:,}", fires, "✗ late" if p.late else "no"]


@pytest.mark.browser
def test_page_reads_like_a_report(browser: Any, tmp_path: Path) -> None:
    from ctxbudget.budget.rules import default_compaction_reserve, default_max_output

    result = replay_file(shared_trace("pi"), windows=[380_000], estimators=EST)
    open_page(browser, write_html(result, tmp_path / "report.html"))
    body = browser.find_element("tag name", "body").text
    assert "first_trigger=" not in body and "null" not in body
    assert "context per call" in body and "first trigger" in body  # the legend
    badge_el = browser.find_element("id", "selfcheck")
    assert "compared with the Python results" in badge_el.get_attribute("title")
    max_output = browser.find_element("id", "param-ctxbudget-max_output")
    assert max_output.get_attribute("placeholder") == f"default {default_max_output(380_000):,}"
    reserve = browser.find_element("id", "param-ctxbudget-compaction_reserve")
    assert reserve.get_attribute("placeholder") == (
        f"default {default_compaction_reserve(380_000):,}"
    )
    assert browser.find_element("id", "param-pi-reserve_tokens").get_attribute("value") == (
        f"{result.policies[1].parameters()['reserve_tokens']:,}"
    )
    svg = browser.find_element("css selector", "svg.panel")
    assert svg.get_dom_attribute("viewBox") and svg.get_dom_attribute("width") == "100%"
    ticks = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg.panel')[0]"
        ".querySelectorAll('text.tick')).map(t => t.textContent)"
    )
    assert "0" in ticks and any("," in t for t in ticks)  # y labels like 100,000
    assert str(len(result.trace.calls) // 2 // 50 * 50) in ticks  # x axis: call indexes


@pytest.mark.browser
def test_typed_numbers_accept_separators(browser: Any, tmp_path: Path) -> None:
    result = replay_file(shared_trace("pi"), windows=[380_000], estimators=EST)
    open_page(browser, write_html(result, tmp_path / "typed.html"))
    box = browser.find_element("id", "window-input")
    box.clear()
    box.send_keys("100,000\n")
    assert browser.find_element("id", "window-input").get_attribute("value") == "100,000"
    assert badge(browser)[0] == "passed"
    smaller = replay_file(shared_trace("pi"), windows=[100_000], estimators=EST).windows[0]
    assert [r[3] for r in summary_rows(browser)] == [
        "never" if p.first_trigger is None else f"call {p.first_trigger:,}"
        for p in smaller.policies
    ]


@pytest.mark.browser
def test_self_check_passes_with_compactions_and_per_model_windows(
    browser: Any, tmp_path: Path
) -> None:
    from tests.replay.test_segments import pi_session

    # Two recorded compactions, two models with different windows, a large reply that the
    # ctxbudget rule learns from: the page recomputes all of it in JavaScript.
    calls = [(20_000 + 9_100 * k, 300, "glm-4.5") for k in range(12)]
    calls[3] = (47_000, 9_000, "glm-4.5")
    calls += [(10_000 + 15_000 * k, 500, "glm-4.6") for k in range(14)]
    calls += [(30_000 + 20_000 * k, 800, "glm-4.6") for k in range(9)]
    path = pi_session(tmp_path, calls, {12, 26})
    result = replay_file(path, estimators=EST)
    assert result.windows[0].by_model == {"glm-4.5": 128_000, "glm-4.6": 200_000}
    assert len(result.windows[0].walls) == 3
    page = write_html(result, tmp_path / "segments.html")
    open_page(browser, page)
    status, text = badge(browser)
    assert status == "passed", text
    marks = browser.find_elements("css selector", "svg.panel[data-policy='letta'] line.compaction")
    assert [m.get_attribute("data-call") for m in marks] == ["12", "26"]
    ours = next(p for p in result.windows[0].policies if p.name == "ctxbudget")
    assert ours.fires[0] == 11  # only the learned reserve (9,000 > 6,144) fires at 120,100
    row = next(r for r in summary_rows(browser) if r[0] == "ctxbudget")
    assert row[5] == f"{ours.late_segments} of 3"


@pytest.mark.browser
def test_learned_line_is_drawn_as_it_moves(browser: Any, tmp_path: Path) -> None:
    result = replay_file(shared_trace("pi"), windows=[380_000], estimators=EST)
    open_page(browser, write_html(result, tmp_path / "moves.html"))
    assert badge(browser)[0] == "passed"
    moving = browser.find_elements("css selector", "svg.panel path.threshold[data-moves='true']")
    assert [m.find_element("xpath", "..").get_attribute("data-policy") for m in moving] == [
        "ctxbudget"  # its reserve grows to the 16,121-token reply at call 46
    ]
