"""``ctxbudget request``: count a whole chat request as the server renders it."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ctxbudget.cli.inputs import read_text
from ctxbudget.counting import RequestCount, count_request
from ctxbudget.counting.select import counter_name_for_model
from ctxbudget.errors import ConfigError
from ctxbudget.messages.detect import parse_request_json
from ctxbudget.messages.model import Request
from ctxbudget.tokens.select import GENERIC_ESTIMATOR

BAR_WIDTH = 30


def choose_counter_name(tokenizer: str | None, model: str | None, request: Request) -> str:
    """``--tokenizer``, else ``--model``, else the body's ``model``, else the generic estimate."""
    if tokenizer and model:
        raise ConfigError("--tokenizer and --model exclude each other; pass one")
    if tokenizer:
        return tokenizer
    chosen_model = model or request.model
    return counter_name_for_model(chosen_model) if chosen_model else GENERIC_ESTIMATOR


def request_json(count: RequestCount, request: Request) -> dict[str, Any]:
    """The ``--json`` shape: breakdown parts add up to ``tokens``."""
    return {
        "counter": count.counter,
        "kind": count.kind,
        "tokens": count.total,
        "breakdown": {"system": count.system, "tools": count.tools, "messages": count.messages},
        "floor": count.floor,
        "messages": [
            {"index": i, "role": m.role, "tokens": t}
            for i, (m, t) in enumerate(zip(request.messages, count.per_message, strict=True))
        ],
    }


def _bar(part: int, total: int) -> str:
    filled = round(BAR_WIDTH * part / total) if total else 0
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def _table(count: RequestCount) -> Table:
    title = f"{count.total:,} tokens ({count.counter}, {count.kind}); floor {count.floor:,}"
    table = Table(title=title)
    table.add_column("part")
    table.add_column("tokens", justify="right")
    table.add_column("share")
    for part, tokens in (("system", count.system), ("tools", count.tools),
                         ("messages", count.messages)):  # fmt: skip
        table.add_row(part, f"{tokens:,}", _bar(tokens, count.total))
    return table


def _server_count(
    request: Request, server: str, tokenizer: str | None, model: str | None
) -> RequestCount:
    """The llama.cpp server's own count: its template, its tokenizer, exact."""
    if tokenizer or model:
        raise ConfigError(
            "--server counts with the server's own template; drop --tokenizer/--model"
        )
    from ctxbudget.providers.llamacpp_count import LlamaCppCounter  # loads the openai SDK

    counter = LlamaCppCounter(server)
    try:
        return counter.count(request)
    finally:
        counter.close()


@click.command("request")
@click.argument("source", metavar="REQUEST.json")
@click.option("--tokenizer", help="A tokenizer or estimator: qwen3, qwen2.5, cl100k_base, hf:PATH.")
@click.option("--model", help="Pick the counter from a model name, e.g. gpt-4o, qwen3-8b.")
@click.option(
    "--server",
    metavar="URL",
    help="Ask this llama.cpp server (llama-server --jinja) to render and tokenise the request.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def request_command(
    source: str, tokenizer: str | None, model: str | None, server: str | None, as_json: bool
) -> None:
    """Count a whole request body (OpenAI or Anthropic shape) the way the server does.

    \b
    Examples:
      ctxbudget request body.json --tokenizer qwen3
      cat body.json | ctxbudget request - --model gpt-4o --json
      ctxbudget request body.json --server http://127.0.0.1:8080 --json
    """
    request = parse_request_json(read_text(source), source)
    if server is not None:
        count = _server_count(request, server, tokenizer, model)
    else:
        name = choose_counter_name(tokenizer, model, request)
        count = count_request(request, name, model=model or request.model)
    if as_json:
        click.echo(json.dumps(request_json(count, request)))
    else:
        Console().print(_table(count))
