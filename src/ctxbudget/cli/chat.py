"""``ctxbudget chat``: the agent loop against a real OpenAI-compatible server.

User turns come from the terminal, or one per line from stdin when it is not a terminal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from ctxbudget.agent.events import LoopEvent
from ctxbudget.agent.loop import Agent
from ctxbudget.agent.session import open_archive
from ctxbudget.budget.rules import POLICY_NAMES
from ctxbudget.cli.demo import BudgetView, default_archive_path, print_summary
from ctxbudget.compaction.strategies import STRATEGY_NAMES
from ctxbudget.providers.limits import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
)

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


class _StreamPrinter:
    """Prints a streamed reply as it arrives; a restarted stream is announced on stderr."""

    def __init__(self) -> None:
        self.printed = False

    def delta(self, text: str) -> None:
        if not self.printed:
            sys.stdout.write("model> ")
            self.printed = True
        sys.stdout.write(text)
        sys.stdout.flush()

    def restart(self, reason: str) -> None:
        sys.stdout.write("\n")
        sys.stdout.flush()
        click.echo(f"ctxbudget: {reason}; retrying, the reply starts over", err=True)
        self.printed = False

    def end(self) -> bool:
        """Finish the reply's line; True when something was printed."""
        printed, self.printed = self.printed, False
        if printed:
            sys.stdout.write("\n")
            sys.stdout.flush()
        return printed


@contextlib.contextmanager
def _debug_log(secrets: tuple[str, ...]) -> Iterator[None]:
    """DEBUG logs of every library on stderr for the command's run, keys redacted."""
    from ctxbudget.providers.endpoint import RedactingFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@click.command("chat")
@click.option("--base-url", required=True, help="Server URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", required=True, help="Model name the server knows.")
@click.option("--window", type=int, default=None, help="Context window in tokens.")
@click.option(
    "--tokenizer",
    default=None,
    help="Count with this tokenizer (qwen3, qwen2.5, cl100k_base) or hf:PATH, a model folder "
    "with its chat template; --model stays the name sent. Default: chosen from --model.",
)
@click.option(
    "--api-key-env",
    default=DEFAULT_API_KEY_ENV,
    show_default=True,
    help="Environment variable holding the API key (never printed or archived).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the session summary as JSON.")
@click.option(
    "--stream",
    is_flag=True,
    help="Stream replies and print them as they arrive (with --json: streamed, not printed).",
)
@click.option("--verbose", is_flag=True, help="Log requests and retries to stderr (DEBUG).")
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
@click.option(
    "--connect-timeout",
    type=float,
    default=DEFAULT_CONNECT_TIMEOUT,
    show_default=True,
    help="Seconds to connect to the server.",
)
@click.option(
    "--read-timeout",
    type=float,
    default=DEFAULT_READ_TIMEOUT,
    show_default=True,
    help="Seconds of silence allowed: before the first byte of a reply, or between two.",
)
@click.option(
    "--request-timeout",
    type=float,
    default=DEFAULT_REQUEST_TIMEOUT,
    show_default=True,
    help="Seconds for a whole model call, retries included.",
)
@click.option(
    "--max-reply-bytes",
    type=int,
    default=DEFAULT_MAX_REPLY_BYTES,
    show_default=True,
    help="Largest reply body read from the server.",
)
def chat_command(
    base_url: str,
    model: str,
    window: int | None,
    tokenizer: str | None,
    api_key_env: str,
    as_json: bool,
    stream: bool,
    verbose: bool,
    policy: str,
    strategy: str,
    max_output: int | None,
    system: str,
    archive: Path | None,
    connect_timeout: float,
    read_timeout: float,
    request_timeout: float,
    max_reply_bytes: int,
) -> None:
    """Chat with a model on an OpenAI-compatible server, kept inside its window.

    \b
    Examples:
      ctxbudget chat --base-url http://127.0.0.1:11434/v1 --model qwen3:8b --window 8192
      printf 'hello\\nand again\\n' | ctxbudget chat --base-url URL --model M --json
      ctxbudget chat --base-url URL --model M --window 8192 --stream --verbose
      ctxbudget chat --base-url URL --model my-model.gguf --tokenizer hf:./Qwen2.5-7B-Instruct
    """
    secrets = (os.environ.get(api_key_env, "").strip(),)
    limits = {
        "connect_timeout": connect_timeout,
        "read_timeout": read_timeout,
        "request_timeout": request_timeout,
        "max_reply_bytes": max_reply_bytes,
    }
    with _debug_log(secrets) if verbose else contextlib.nullcontext():
        _chat(
            base_url, model, window, tokenizer, api_key_env, as_json, stream, policy, strategy,
            max_output, system, archive, limits,
        )  # fmt: skip


def _chat(
    base_url: str,
    model: str,
    window: int | None,
    tokenizer: str | None,
    api_key_env: str,
    as_json: bool,
    stream: bool,
    policy: str,
    strategy: str,
    max_output: int | None,
    system: str,
    archive: Path | None,
    limits: dict[str, Any],
) -> None:
    from ctxbudget.counting import RequestCounter
    from ctxbudget.counting.select import counter_name_for_model
    from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

    printer = _StreamPrinter()
    shows_stream = stream and not as_json
    counter_name = tokenizer or counter_name_for_model(model)
    counter = RequestCounter(counter_name, model=model)  # a bad name stops here, before any I/O
    provider = OpenAICompatibleProvider(
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        window=window,
        tokenizer=counter_name if counter.kind == "exact" else None,
        stream=stream,
        on_delta=printer.delta if shows_stream else None,
        on_restart=printer.restart if shows_stream else None,
        **limits,
    )
    console = Console(stderr=as_json, quiet=as_json, highlight=False)
    view = BudgetView(console)
    path = archive or default_archive_path("chat")
    settings = {
        "model": model,
        "window": window,
        "policy": policy,
        "strategy": strategy,
        "tokenizer": tokenizer,
    }

    def warn(text: str) -> None:
        click.echo(f"ctxbudget: {text}", err=True)

    def on_event(event: LoopEvent) -> None:
        if event.kind == "window_changed":  # on stderr in both modes: it changes the session
            d = event.data
            warn(f"window {d['old']:,} -> {d['window']:,} tokens: {d['reason']}; using it now")
            return
        view.event(event)

    with open_archive(path, settings, warn=warn) as opened:
        agent = Agent(
            provider,
            system=system,
            window=window,
            policy=policy,
            strategy=strategy,
            counter=counter,
            archive=opened.archive,
            on_event=on_event,
            max_output_tokens=max_output,
            model=model,
        )
        agent.restore(opened.state)
        agent.check_floor()  # before reading any input: a floor that cannot fit stops here
        for text in _lines(console):
            reply = agent.run_turn(text)
            if not printer.end():
                console.print(f"[bold]model>[/bold] {escape(reply.text)}", soft_wrap=True)
            view.turn(agent)
        summary = agent.summary(path)
    if as_json:
        click.echo(json.dumps(summary.to_json(), ensure_ascii=False))
    else:
        print_summary(console, summary)
