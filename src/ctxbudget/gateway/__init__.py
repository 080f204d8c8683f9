"""``ctxbudget serve``: the budget as an HTTP gateway in front of any OpenAI-compatible server.

The package needs the ``serve`` extra (starlette, uvicorn, httpx, orjson):
``pip install 'ctxbudget[serve]'``. The modules:

- `api`: the `WireApi` protocol each wire API implements (Chat Completions in `chat`; Responses
  and Anthropic Messages alongside) and the `Parsed` value it reads a request into;
- `config`: `GatewayConfig`, every setting of one gateway;
- `sse`: an incremental, bounded parser of Server-Sent Events;
- `upstream`: the HTTP client to the upstream server (deadlines, caps, streaming);
- `conversations`: conversation identity and one `BudgetSession` per conversation;
- `discover`: the upstream's window, asked of the server itself;
- `app`: the Starlette application (`create_app`).
"""

from __future__ import annotations

__all__: list[str] = []
