"""``ctxbudget chat``: the agent loop against a real OpenAI-compatible server.

User turns come from the terminal, or one per line from stdin when it is not a terminal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import click
from rich.console import Console

from ctxbudget.agent.loop import Agent
from ctxbudget.agent.session import open_archive
from ctxbudget.budget.rules import POLICY_NAMES
from ctxbudget.cli.demo import BudgetView, default_archive_path, print_summary
from ctxbudget.compaction.strategies import STRATEGY_NAMES
from ctxbudget.tokens.registry import tokenizer_for_model

__all__ = ["chat_command"]

# The provider's own default (providers/openai_compat.py); that module is imported only when the
# command runs, since the openai SDK takes about 0.9 s to import.
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_SYSTEM = "You are a helpful assistant. Answer concisely."


def _lines(console: Console) -> Iterator[str]:
    """User turns: prompted on a terminal, else one per non-empty stdin line."""
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = console.input("[bold]you>[/bold] ") if interactive else sys.stdin.readline()
        except EOFError:
            return
        if not interactive and line == "":
            return
        text = line.strip()
        if text in ("/exit", "/quit"):
            return
        if text:
            yield text


@click.command("chat")
@click.option("--base-url", required=True, help="Server URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", required=True, help="Model name the server knows.")
@click.option("--window", type=int, default=None, help="Context window in tokens.")
@click.option(
    "--api-key-env",
    default=DEFAULT_API_KEY_ENV,
    show_default=True,
    help="Environment variable holding the API key (never printed or archived).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the session summary as JSON.")
@click.option("--policy", type=click.Choice(POLICY_NAMES), default="ctxbudget", show_default=True)
@click.option("--strategy", type=click.Choice(STRATEGY_NAMES), default="layered", show_default=True)
@click.option("--max-output", type=int, default=None, help="Max output tokens per reply.")
@click.option("--system", default=DEFAULT_SYSTEM, help="System prompt.")
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Session file (JSONL). Default: a new file in the cache.",
)
def chat_command(
    base_url: str,
    model: str,
    window: int | None,
    api_key_env: str,
    as_json: bool,
    policy: str,
    strategy: str,
    max_output: int | None,
    system: str,
    archive: Path | None,
) -> None:
    """Chat with a model on an OpenAI-compatible server, kept inside its window.

    \b
    Examples:
      ctxbudget chat --base-url http://127.0.0.1:11434/v1 --model qwen3:8b --window 8192
      printf 'hello\\nand again\\n' | ctxbudget chat --base-url URL --model M --json
    """
    from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

    kind, tokenizer = tokenizer_for_model(model)
    provider = OpenAICompatibleProvider(
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        window=window,
        tokenizer=tokenizer if kind == "tokenizer" else None,
    )
    console = Console(stderr=as_json, quiet=as_json, highlight=False)
    view = BudgetView(console)
    path = archive or default_archive_path("chat")
    settings = {"model": model, "window": window, "policy": policy, "strategy": strategy}
    warn = lambda text: click.echo(f"ctxbudget: {text}", err=True)  # noqa: E731
    with open_archive(path, settings, warn=warn) as opened:
        agent = Agent(
            provider,
            system=system,
            window=window,
            policy=policy,
            strategy=strategy,
            counter=tokenizer,
            archive=opened.archive,
            on_event=view.event,
            max_output_tokens=max_output,
            model=model,
        )
        agent.restore(opened.state)
        agent.check_floor()  # before reading any input: a floor that cannot fit stops here
        for text in _lines(console):
            reply = agent.run_turn(text)
            console.print(f"[bold]model>[/bold] {reply.text}", soft_wrap=True)
            view.turn(agent)
        summary = agent.summary(path)
    if as_json:
        click.echo(json.dumps(summary.to_json(), ensure_ascii=False))
    else:
        print_summary(console, summary)
