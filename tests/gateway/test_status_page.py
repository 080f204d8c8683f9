"""The status page: self-contained, its policy allows only its own script and style, and in
headless Chromium against a real server its numbers equal the status JSON, it refreshes itself,
asks for a key when the status needs one, and hostile text from requests stays inert."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.agent.conversations import long_conversation
from tests.gateway.ops_server import running

from ctxbudget.agent.budget_session import BudgetSession
from ctxbudget.counting import RequestCounter
from ctxbudget.gateway.status_page import (
    RECENT_COMPACTIONS,
    conversation_status,
    render_status_page,
)
from ctxbudget.messages.model import Request

PAYLOADS = [
    "<script>window.__pwned = 1</script>",
    "</script><script>window.__pwned = 2</script>",
    '"><img src=x onerror="window.__pwned = 3">',
    "<!-- <svg onload=window.__pwned=4>",
    "javascript:window.__pwned = 5",
    "line\u2028separator & ampersand",
]


def status(*conversations: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A `GatewayStatus` object (the shape the page reads)."""
    out: dict[str, Any] = {
        "upstream": "http://127.0.0.1:8080/v1",
        "window": 8192,
        "window_source": "--window",
        "summary_calls": 0,
        "conversations": list(conversations),
    }
    return {**out, **top}


def conversation(cid: str, **numbers: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": cid,
        "api": "chat",
        "model": "qwen3-8b",
        "window": 8192,
        "tokens": 5012,
        "floor_tokens": 1200,
        "threshold_tokens": 6144,
        "requests": 12,
        "overflows": 0,
        "created": time.time() - 60,
        "updated": time.time(),
        "recent_compactions": [],
        "summary": None,
    }
    out.update(numbers)
    out.setdefault("compactions", len(out["recent_compactions"]))
    return out


def compaction(turn: int, before: int, after: int) -> dict[str, Any]:
    return {
        "turn": turn,
        "trigger": "context_pressure",
        "strategy": "layered",
        "messages_before": 40 + turn,
        "messages_after": 9,
        "tokens_before": before,
        "tokens_after": after,
    }


# -- the page as served ---------------------------------------------------------------------


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_the_page_is_self_contained_and_its_policy_names_its_own_code() -> None:
    page, policy = render_status_page()
    assert page.count("<script") == 1 and page.count("<style") == 1
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing remote
    assert "@import" not in page and "url(" not in page
    script = re.search(r"<script>(.*?)</script>", page, re.S)
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    assert script and style
    assert f"script-src '{_hash(script.group(1))}'" in policy
    assert f"style-src '{_hash(style.group(1))}'" in policy
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "unsafe-inline" not in policy


def test_a_status_path_is_escaped_into_the_page() -> None:
    page, _ = render_status_page('/s"><script>alert(1)</script>')
    assert page.count("<script") == 1
    assert 'data-status-url="/s&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in page


def test_an_entry_from_a_budget_session() -> None:
    counter = RequestCounter("qwen3")

    class Summarizer:
        def summarize(self, request: Request) -> str:
            return "<b>summary</b> of the talk"

    session = BudgetSession(
        window=2048, counter=counter, summarizer=Summarizer(), strategy="summarize"
    )
    sent = session.run(long_conversation(), lambda r: r, new_turn=True)
    entry = conversation_status("c-1", session, tokens=counter.count(sent).total, api="chat")
    record = session.compactions[-1]
    assert entry["window"] == 2048 and entry["id"] == "c-1"
    assert entry.get("recent_compactions") == [record.to_json()]
    assert entry.get("compactions") == len(session.compactions) == 1
    assert entry["summary"] == session.summaries[-1]  # the handoff text, escaped by the page
    assert "<b>summary</b> of the talk" in session.summaries[-1]
    assert entry.get("floor_tokens") == session.floor_tokens > 0
    threshold = entry.get("threshold_tokens")
    assert threshold is not None and 0 < threshold < 2048
    assert session.policy.fires(threshold + 1, 2048) and not session.policy.fires(threshold, 2048)
    assert RECENT_COMPACTIONS >= 1


# -- headless Chromium against a real server ------------------------------------------------


Served = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Served]]:
    """A real server whose /ctxbudget/status answers what the test last wrote."""
    folder = tmp_path_factory.mktemp("status")
    path = folder / "status.json"

    def write(value: dict[str, Any]) -> None:
        scratch = folder / "status.tmp"
        scratch.write_text(json.dumps(value), encoding="utf-8")
        scratch.replace(path)  # the server never reads half a file

    write(status())
    with running(path) as server:
        yield server.url, write


def wait_for(browser: Any, condition: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what}: not seen in {timeout} s; state: {state(browser)}")


def state(browser: Any) -> str:
    return str(browser.execute_script("return document.getElementById('state').textContent"))


def renders(browser: Any) -> int:
    return int(browser.execute_script("return Number(document.body.dataset.renders || 0)"))


def load(browser: Any, url: str) -> None:
    browser.get(url)
    wait_for(browser, lambda: renders(browser) >= 1, "a first render")


def after_next_render(browser: Any) -> None:
    seen = renders(browser)
    wait_for(browser, lambda: renders(browser) > seen + 1, "a fresh render")  # a whole cycle


READ_CARDS = """
const num = (el, sel) => { const t = el.querySelector(sel).textContent;
  return t === '-' ? null : Number(t.replace(/,/g, '')); };
return [...document.querySelectorAll('#conversations > article.conv')].map((el) => ({
  id: el.querySelector('.conv-id').textContent,
  data_id: el.dataset.id,
  model: el.querySelector('.conv-model').textContent,
  tokens: num(el, '.conv-tokens'), window: num(el, '.conv-window'),
  floor_tokens: num(el, '.conv-floor'), threshold_tokens: num(el, '.conv-threshold'),
  requests: num(el, '.conv-requests'), overflows: num(el, '.conv-overflows'),
  compactions: num(el, '.conv-compactions'),
  percent: el.querySelector('.conv-percent').textContent,
  segments: [...el.querySelectorAll('.bar .seg')].map((s) => Number(s.dataset.tokens)),
  widths: [...el.querySelectorAll('.bar .seg')].map((s) => s.getBoundingClientRect().width),
  over: el.querySelector('.bar').classList.contains('over'),
  recent: [...el.querySelectorAll('.compactions li')].map((li) => li.textContent),
  summary: el.querySelector('.conv-summary').textContent,
}));
"""


def cards(browser: Any) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in browser.execute_script(READ_CARDS)}


def bar_parts(c: dict[str, Any]) -> list[int]:
    """The demo bar's parts: floor, conversation, free below the line, kept free."""
    window, tokens = c["window"], c["tokens"]
    floor = min(c.get("floor_tokens") or 0, tokens)
    conv = max(0, tokens - floor)
    threshold = c.get("threshold_tokens")
    reserve = 0 if threshold is None else max(0, min(window, window - threshold))
    return [floor, conv, max(0, window - reserve - floor - conv), reserve]


@pytest.mark.browser
def test_the_numbers_shown_are_the_status_numbers(browser: Any, served: tuple[str, Served]) -> None:
    url, write = served
    convs = [
        conversation("c-small", tokens=900, floor_tokens=300, requests=1),
        conversation(
            "c-compacted",
            tokens=30_517,
            window=32_768,
            floor_tokens=14_022,
            threshold_tokens=26_000,
            requests=118,
            overflows=2,
            compactions=7,  # more than the recent ones listed
            recent_compactions=[compaction(t, 31_000 + t, 15_000 + t) for t in (4, 9, 15)],
            summary="The user asked for a refactor; tests pass.",
        ),
        conversation("c-over", tokens=9_000, window=8192, threshold_tokens=None, model=None),
    ]
    write(status(*convs, window_source="llama.cpp /props", summary_calls=5))
    load(browser, url + "/")
    shown = cards(browser)
    assert sorted(shown) == sorted(c["id"] for c in convs)
    for c in convs:
        card = shown[c["id"]]
        keys = ("tokens", "window", "floor_tokens", "threshold_tokens", "requests", "compactions")
        for key in keys:
            assert card[key] == c[key], (c["id"], key)
        assert card["overflows"] == c["overflows"]
        assert card["percent"] == f"{100 * c['tokens'] / c['window']:.1f}%"
        assert card["segments"] == bar_parts(c)
        total, drawn = sum(card["segments"]), sum(card["widths"])
        for part, width in zip(card["segments"], card["widths"], strict=True):
            assert width == pytest.approx(drawn * part / total, abs=1.0)  # pixels
        assert card["over"] == (c["tokens"] > c["window"])
        assert len(card["recent"]) == len(c["recent_compactions"])
        for line, k in zip(card["recent"], c["recent_compactions"], strict=True):
            assert f"turn {k['turn']} · pressure · layered" in line
            assert f"{k['tokens_before']:,} → {k['tokens_after']:,} tokens" in line
        assert card["summary"] == (c["summary"] or "")
    text = browser.execute_script("return document.getElementById('upstream').textContent")
    assert "http://127.0.0.1:8080/v1" in text and "8,192" in text
    assert "llama.cpp /props" in text and "5 summary calls" in " ".join(text.split())
    count = browser.execute_script(
        "return document.getElementById('conversation-count').textContent"
    )
    assert count == "3"


@pytest.mark.browser
def test_the_page_refreshes_itself(browser: Any, served: tuple[str, Served]) -> None:
    url, write = served
    write(status(conversation("c-live", tokens=1_000)))
    load(browser, url + "/")
    assert cards(browser)["c-live"]["tokens"] == 1_000
    write(status(conversation("c-live", tokens=4_321), conversation("c-new", tokens=77)))
    wait_for(browser, lambda: "c-new" in cards(browser), "the new conversation")
    assert cards(browser)["c-live"]["tokens"] == 4_321
    assert state(browser).startswith("live")


@pytest.mark.browser
def test_hostile_text_from_requests_stays_inert(browser: Any, served: tuple[str, Served]) -> None:
    url, write = served
    convs = [
        conversation(
            payload,
            model=payload,
            api=payload,
            summary=payload,
            recent_compactions=[{**compaction(1, 9000, 3000), "strategy": payload}],
        )
        for payload in PAYLOADS
    ]
    write(status(*convs, upstream=PAYLOADS[2], window_source=PAYLOADS[1]))
    load(browser, url + "/")
    after_next_render(browser)  # drawn at least twice: a payload had its chance to run
    assert browser.execute_script("return window.__pwned") is None
    counts = browser.execute_script(
        "return ['img', 'svg', 'iframe', 'script']"
        ".map((t) => document.getElementsByTagName(t).length)"
    )
    assert counts == [0, 0, 0, 1]  # no element made from text; only the page's own script
    shown = cards(browser)
    assert sorted(shown) == sorted(PAYLOADS)  # each shown as the very text it is
    for payload, card in shown.items():
        assert card["model"] == payload and card["summary"] == payload
        assert card["data_id"] == payload
        assert payload in card["recent"][0]
    upstream = browser.execute_script("return document.getElementById('upstream-url').textContent")
    assert upstream == PAYLOADS[2]


@pytest.mark.browser
def test_a_status_behind_a_key_asks_for_it(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.write_text(json.dumps(status(conversation("c-keyed", tokens=2_048))), encoding="utf-8")
    with running(path, "--key", "s3cret") as server:
        browser.get(server.url + "/")
        wait_for(
            browser,
            lambda: browser.execute_script("return !document.getElementById('key-form').hidden"),
            "the key form",
        )
        assert cards(browser) == {}
        browser.get(server.url + "/#key=s3cret")
        browser.refresh()  # a fragment change alone does not reload the page
        wait_for(browser, lambda: "c-keyed" in cards(browser), "the keyed status")
        assert "s3cret" not in browser.current_url  # taken out of the address bar


# -- the real gateway, with the operator's routes mounted -----------------------------------


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`create_app` on the embedded mock model (window 2,048) with `ops_routes` mounted, served
    by uvicorn on a loopback port (in a thread of this process)."""
    import socket
    import threading

    import uvicorn

    from ctxbudget.gateway.app import create_app
    from ctxbudget.gateway.config import GatewayConfig
    from ctxbudget.gateway.lifecycle import Health, mount_ops, ops_routes
    from ctxbudget.gateway.metrics import GatewayMetrics

    folder = tmp_path_factory.mktemp("gateway")
    config = GatewayConfig(
        upstream="mock", window=2048, tokenizer="qwen3", state=folder / "state.sqlite3"
    )
    app = create_app(config)
    mount_ops(app, ops_routes(GatewayMetrics(), Health(), refresh_ms=500))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def chat(url: str, topic: str, turns: int) -> list[str]:
    """A conversation of ``turns`` long user turns through the gateway; its compacted flags."""
    import httpx

    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    flags = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for turn in range(turns):
            messages.append({"role": "user", "content": f"{topic} {turn}: " + "word " * 80})
            reply = client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
            assert reply.status_code == 200, reply.text
            flags.append(reply.headers["x-ctxbudget-compacted"])
            messages.append(reply.json()["choices"][0]["message"])
    return flags


@pytest.mark.browser
def test_the_page_draws_the_real_gateway_status(browser: Any, gateway_url: str) -> None:
    import httpx

    assert "1" in chat(gateway_url, "gardening", 22)  # the gateway compacted on the way
    chat(gateway_url, "sailing", 3)
    truth = httpx.get(gateway_url + "/ctxbudget/status", timeout=10).json()
    assert len(truth["conversations"]) == 2
    load(browser, gateway_url + "/")
    shown = cards(browser)
    assert sorted(shown) == sorted(c["id"] for c in truth["conversations"])
    for c in truth["conversations"]:
        card = shown[c["id"]]
        for key in ("tokens", "window", "requests", "compactions", "overflows"):
            assert card[key] == c[key], (c["id"], key)
        assert card["percent"] == f"{100 * c['tokens'] / c['window']:.1f}%"
    assert any(c["compactions"] >= 1 for c in truth["conversations"])
    window = browser.execute_script("return document.getElementById('upstream-window').textContent")
    assert window == f"{truth['window']:,}"
    health = httpx.get(gateway_url + "/healthz", timeout=10)
    assert health.json()["status"] == "ok"
    metrics = httpx.get(gateway_url + "/metrics", timeout=10)
    assert metrics.status_code == 200 and "ctxbudget_requests_total" in metrics.text
