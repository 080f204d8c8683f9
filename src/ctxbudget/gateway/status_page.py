"""The gateway's live status page at ``/``: every conversation's context as a bar against its
window, its recent compactions, the upstream and its window; it refreshes itself.

The page is one self-contained HTML document (inline CSS and script, no CDN, no data in it). Its
script fetches the status JSON (``GET /ctxbudget/status``, served by the app) every couple of
seconds and draws it. Everything that came from requests (conversation ids, model names, the
summaries) is inserted with ``textContent`` only, never as markup; the page's Content-Security-
Policy allows only its own script and style (by hash) and fetches to its own origin, so even a
slip would not run injected code. When the status endpoint asks for a key (401/403), the page asks
for it once and sends it as ``Authorization: Bearer``; the key stays in the tab's
``sessionStorage`` (a ``#key=...`` fragment also works: fragments never reach the server or logs).

The status JSON the page reads (`GatewayStatus`; ``GET /ctxbudget/status`` of `app` serves it)::

    {
      "upstream": "http://127.0.0.1:8080/v1",   # as the gateway shows it (no key)
      "window": 8192, "window_source": "llama.cpp /props",
      "summary_calls": 3,
      "conversations": [                        # most recent first
        {
          "id": "b3cc16a8...", "api": "chat", "requests": 12,
          "window": 8192,            # the window in force for this conversation
          "tokens": 5012,            # the last request forwarded, as counted
          "overflows": 0, "compactions": 3, "summaries": 2,
          "created": 1733299000.0, "updated": 1733299990.0,
          # optional, drawn when present (`conversation_status` gives them all):
          "model": "qwen3",
          "floor_tokens": 1200,      # system prompt + tools
          "threshold_tokens": 6144,  # the line over which the next request is compacted
          "recent_compactions": [    # the most recent last (a few only)
            {"turn": 3, "trigger": "context_pressure", "strategy": "layered",
             "messages_before": 40, "messages_after": 9,
             "tokens_before": 6500, "tokens_after": 2100}
          ],
          "summary": "the latest handoff summary, or null"
        }
      ]
    }

Only ``upstream``, ``conversations`` and each conversation's ``id``, ``window`` and ``tokens``
are needed; the page draws whatever else there is. `conversation_status` builds one entry from a
`BudgetSession`, with every field.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from importlib import resources
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from ctxbudget.agent.budget_session import BudgetSession
    from ctxbudget.agent.events import CompactionRecord

__all__ = [
    "RECENT_COMPACTIONS",
    "CompactionStatus",
    "ConversationStatus",
    "GatewayStatus",
    "conversation_status",
    "render_status_page",
    "status_page_route",
]

RECENT_COMPACTIONS = 5
"""How many of a conversation's compactions the status lists (the most recent)."""
SUMMARY_CHARS = 2_000
"""A summary is cut to this many characters in the status (the page is an overview)."""


class CompactionStatus(TypedDict):
    """One compaction: `CompactionRecord.to_json`'s shape."""

    turn: int
    trigger: Literal["context_pressure", "context_overflow"]
    strategy: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int


class ConversationStatus(TypedDict):
    """One conversation's numbers."""

    id: str
    window: int
    tokens: int
    api: NotRequired[str | None]
    requests: NotRequired[int | None]
    overflows: NotRequired[int | None]
    compactions: NotRequired[int | None]
    summaries: NotRequired[int | None]
    created: NotRequired[float | None]
    updated: NotRequired[float | None]
    model: NotRequired[str | None]
    floor_tokens: NotRequired[int | None]
    threshold_tokens: NotRequired[int | None]
    recent_compactions: NotRequired[list[CompactionStatus]]
    summary: NotRequired[str | None]


class GatewayStatus(TypedDict):
    """The whole ``GET /ctxbudget/status`` object."""

    upstream: str
    conversations: list[ConversationStatus]
    window: NotRequired[int | None]
    window_source: NotRequired[str | None]
    summary_calls: NotRequired[int | None]


def conversation_status(
    conversation_id: str,
    session: BudgetSession,
    *,
    tokens: int,
    api: str | None = None,
    model: str | None = None,
    requests: int | None = None,
    created: float | None = None,
    updated: float | None = None,
) -> ConversationStatus:
    """One conversation's status entry from its `BudgetSession` (``tokens``: its last
    forwarded request as counted; the session keeps only the largest)."""
    state = session.snapshot()
    learned = state.learned
    threshold = session.policy.threshold_in_session(
        state.window,
        largest_reply=learned.largest_reply,
        largest_growth=learned.largest_growth,
    )
    recent = state.compactions[-RECENT_COMPACTIONS:]
    summary = state.summaries[-1][:SUMMARY_CHARS] if state.summaries else None
    return {
        "id": conversation_id,
        "api": api,
        "requests": requests,
        "window": state.window,
        "tokens": tokens,
        "overflows": state.overflows,
        "compactions": len(state.compactions),
        "summaries": len(state.summaries),
        "created": created,
        "updated": updated,
        "model": model,
        "floor_tokens": session.floor_tokens,
        "threshold_tokens": max(0, min(threshold, state.window)),
        "recent_compactions": [_compaction(c) for c in recent],
        "summary": summary,
    }


def _compaction(record: CompactionRecord) -> CompactionStatus:
    return {
        "turn": record.turn,
        "trigger": record.trigger,
        "strategy": record.strategy,
        "messages_before": record.messages_before,
        "messages_after": record.messages_after,
        "tokens_before": record.tokens_before,
        "tokens_after": record.tokens_after,
    }


# -- the page --------------------------------------------------------------------------------


def _asset(name: str) -> str:
    return resources.files("ctxbudget.gateway").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def render_status_page(
    status_path: str = "/ctxbudget/status", *, refresh_ms: int = 2_000
) -> tuple[str, str]:
    """The page (HTML) reading ``status_path`` every ``refresh_ms`` milliseconds, and the
    Content-Security-Policy to serve it with (its own script and style, by hash)."""
    script = _asset("status_page.js")
    style = _asset("status_page.css")
    for asset, closing in ((script, "</script"), (style, "</style")):
        if closing in asset.lower():  # our own assets; guard against a careless edit
            raise AssertionError(f"a status page asset must not contain {closing}")
    page = _asset("status_page.html")
    page = page.replace("__STATUS_URL__", escape(status_path, quote=True))
    page = page.replace("__REFRESH_MS__", str(int(refresh_ms)))
    page = page.replace("/*__STYLE__*/", style).replace("/*__SCRIPT__*/", script)
    # A hash covers exactly what sits between the tags (the page has one of each).
    inline_script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    inline_style = page.split("<style>", 1)[1].split("</style>", 1)[0]
    policy = (
        "default-src 'none'; "
        f"script-src '{_sha256(inline_script)}'; "
        f"style-src '{_sha256(inline_style)}'; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return page, policy


def status_page_route(
    path: str = "/", *, status_path: str = "/ctxbudget/status", refresh_ms: int = 2_000
) -> Route:
    """The Starlette route serving the page at ``path``; it reads ``status_path`` every
    ``refresh_ms`` milliseconds. The page holds no data, so it may be served without a key."""
    html, policy = render_status_page(status_path, refresh_ms=refresh_ms)
    headers = {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }

    async def status_page(request: Request) -> Response:
        return HTMLResponse(html, headers=headers)

    return Route(path, status_page, methods=["GET"], name="status_page")
