"""Real coding agents through ``ctxbudget serve`` finish a 30-step task on a small window.

Each client is told a 131,072-token window; the scripted upstream behind the gateway has about
eight steps' worth (tests/clients/conftest.py WINDOW) and refuses anything larger with its API's
real overflow error. The same runs without the gateway fail (test_without_gateway.py). Between
the client and the gateway a recording proxy checks that no error of any kind reached the client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.gateway.scripted_http_upstream import FINAL_ANSWER, ScriptedUpstream

from .conftest import DECLARED_WINDOW, STEPS, WINDOW, Gateway, scripted, serve
from .harness import ClientRun, run_claude, run_codex, run_opencode, run_pi
from .recorder import Exchange, Recorder

pytestmark = pytest.mark.clients


def _assert_finished(run: ClientRun, up: ScriptedUpstream, rec: Recorder, gw: Gateway) -> None:
    """The run ended with the scripted answer, every step was served, no error reached the client,
    the upstream never answered a prompt over its window, and the gateway compacted."""
    errors = "\n".join(exchange.summary() for exchange in rec.errors())
    why = f"{run.describe()}\n--- errors the client got ---\n{errors}\n{gw.log_tail()}"
    assert FINAL_ANSWER in run.stdout, why
    assert run.returncode == 0, why
    assert up.steps_served == STEPS, why
    assert rec.errors() == [], why
    assert up.largest_accepted() <= up.window, why
    compacted = [e for e in rec.exchanges if e.reply_headers.get("x-ctxbudget-compacted") == "1"]
    assert compacted, f"the gateway never said it compacted\n{why}"
    # The task's requests (those offering tools) were recognised as one conversation, so each
    # compaction was done once and reused, not redone on every request.
    task = {
        e.reply_headers.get("x-ctxbudget-conversation") for e in rec.exchanges if _offers_tools(e)
    }
    assert len(task) == 1, f"the task was split into conversations {task}\n{why}"


def _offers_tools(exchange: Exchange) -> bool:
    try:
        body = json.loads(exchange.request_body or b"{}")
    except ValueError:
        return False
    return isinstance(body, dict) and bool(body.get("tools"))


def test_pi_finishes_through_the_gateway(
    upstream_for: dict[str, ScriptedUpstream], tmp_path: Path
) -> None:
    up = upstream_for["pi"]
    with serve(f"{up.url}/v1", tmp_path) as gw, Recorder(gw.url) as rec:
        run = run_pi(f"{rec.url}/v1", tmp_path, window=DECLARED_WINDOW)
    _assert_finished(run, up, rec, gw)


def test_opencode_finishes_through_the_gateway(
    upstream_for: dict[str, ScriptedUpstream], tmp_path: Path
) -> None:
    up = upstream_for["opencode"]
    with serve(f"{up.url}/v1", tmp_path) as gw, Recorder(gw.url) as rec:
        run = run_opencode(f"{rec.url}/v1", tmp_path, window=DECLARED_WINDOW)
    _assert_finished(run, up, rec, gw)


def test_codex_finishes_through_the_gateway(
    upstream_for: dict[str, ScriptedUpstream], tmp_path: Path
) -> None:
    up = upstream_for["codex"]
    with serve(f"{up.url}/v1", tmp_path) as gw, Recorder(gw.url) as rec:
        run = run_codex(f"{rec.url}/v1", tmp_path)
    _assert_finished(run, up, rec, gw)


def test_claude_code_finishes_through_the_gateway(
    upstream_for: dict[str, ScriptedUpstream], tmp_path: Path
) -> None:
    up = upstream_for["claude"]
    with serve(f"{up.url}/v1", tmp_path) as gw, Recorder(gw.url) as rec:
        run = run_claude(rec.url, tmp_path)
    _assert_finished(run, up, rec, gw)


def test_pi_finishes_when_the_server_is_smaller_than_it_says(
    task_dir: Path, tmp_path: Path
) -> None:
    # /props says twice the real window: the gateway plans for the larger one, the upstream
    # refuses with llama.cpp's error (it states n_ctx); the gateway adopts it, compacts, resends.
    window = WINDOW["pi"]
    with (
        scripted(window, task_dir, advertised=2 * window) as up,
        serve(f"{up.url}/v1", tmp_path) as gw,
        Recorder(gw.url) as rec,
    ):
        run = run_pi(f"{rec.url}/v1", tmp_path, window=DECLARED_WINDOW)
    assert up.rejected(), run.describe()
    _assert_finished(run, up, rec, gw)


def test_claude_code_finishes_when_the_server_is_smaller_than_it_says(
    task_dir: Path, tmp_path: Path
) -> None:
    # As above through Messages: the refusal is Anthropic's "prompt is too long: N > W maximum".
    window = WINDOW["claude"]
    with (
        scripted(window, task_dir, advertised=2 * window) as up,
        serve(f"{up.url}/v1", tmp_path) as gw,
        Recorder(gw.url) as rec,
    ):
        run = run_claude(rec.url, tmp_path)
    assert up.rejected(), run.describe()
    _assert_finished(run, up, rec, gw)


def test_codex_finishes_when_the_server_is_smaller_than_it_says(
    task_dir: Path, tmp_path: Path
) -> None:
    # As above through Responses, where the refusal is OpenAI's context_length_exceeded with no
    # limit in it: the gateway adopts the refused request's size plus the reply room and
    # compacts below it (it used to resend the same request: refused twice, Codex exit 1).
    window = WINDOW["codex"]
    with (
        scripted(window, task_dir, advertised=2 * window) as up,
        serve(f"{up.url}/v1", tmp_path) as gw,
        Recorder(gw.url) as rec,
    ):
        run = run_codex(f"{rec.url}/v1", tmp_path)
    assert up.rejected(), run.describe()
    _assert_finished(run, up, rec, gw)


def test_claude_code_whose_floor_exceeds_the_window_gets_anthropics_error(
    task_dir: Path, tmp_path: Path
) -> None:
    # Claude Code's first request alone (system prompt + 12 tools) is ~11,600 tokens.
    window = 8_000
    with (
        scripted(window, task_dir) as up,
        serve(f"{up.url}/v1", tmp_path) as gw,
        Recorder(gw.url) as rec,
    ):
        run = run_claude(rec.url, tmp_path)
    why = f"{run.describe()}\n{gw.log_tail()}"
    refused = [
        e for e in rec.exchanges if e.path.startswith("/v1/messages?") or e.path == "/v1/messages"
    ]
    assert refused and all(e.status == 400 for e in refused), why
    body = json.loads(refused[0].reply_body)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", why
    numbers = re.search(
        r"prompt is too long: (\d+) tokens > (\d+) maximum", body["error"]["message"]
    )
    assert numbers is not None, why
    assert int(numbers.group(1)) > window and int(numbers.group(2)) == window, why
    # Nothing was forwarded to be truncated or refused upstream.
    assert [s for s in up.seen if s.reply != "count"] == [], why
    assert run.returncode != 0 and FINAL_ANSWER not in run.stdout, why
    assert "prompt is too long" in (run.stdout + run.stderr).lower(), why
