"""Stand-in for ``ctxbudget serve`` while the CLI command is not on this branch yet: the same
app (`create_app` with the three wire APIs) under uvicorn, from the same flags the tests pass.

Run as ``python tests/clients/serve_app.py --upstream URL --host H --port P --state PATH
--tokenizer NAME``. The fixture in conftest.py uses the real CLI whenever it has ``serve``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import uvicorn

from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.messages_api import MESSAGES
from ctxbudget.gateway.responses import RESPONSES


def main() -> None:
    """Parse the ``serve`` flags the tests use and serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--tokenizer")
    parser.add_argument("--window", type=int)
    args = parser.parse_args()
    config = GatewayConfig(
        upstream=args.upstream,
        host=args.host,
        port=args.port,
        state=args.state,
        tokenizer=args.tokenizer,
        window=args.window,
    )
    app = create_app(config, apis=(CHAT, RESPONSES, MESSAGES))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
