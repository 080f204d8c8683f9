"""``ctxbudget demo``: the agent loop on the embedded mock model, offline, with a budget bar.

Also the terminal view shared with ``ctxbudget chat``: the bar, the compaction lines and the
summary table.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ctxbudget.agent.events import LoopEvent, SessionSummary
from ctxbudget.agent.loop import Agent
from ctxbudget.agent.session import open_archive
from ctxbudget.budget.rules import POLICY_NAMES, validate_window
from ctxbudget.compaction.archive import user_cache_dir
from ctxbudget.compaction.strategies import STRATEGY_NAMES
from ctxbudget.errors import ConfigError
from ctxbudget.providers.mock import MockProvider
from ctxbudget.providers.scenarios import SCENARIO_NAMES, get_scenario

__all__ = ["BudgetView", "default_archive_path", "demo_command", "print_summary"]

# Small enough that compactions happen, large enough that several turns fit between them: a
# coding turn adds about 1,500 tokens (4,096 compacted every second turn; 8,192 every third or
# fourth). The chat scenario's window is the seed's experiment (1,200, 17 turns).
DEFAULT_WINDOWS = {"coding": 8192, "chat": 1200}
DEFAULT_TURNS = {"coding": 16, "chat": 17}
BAR_WIDTH = 20  # the turn line fits 80 columns


def default_archive_path(prefix: str = "demo") -> Path:
    """A fresh archive file under the user's cache folder (``$XDG_CACHE_HOME/ctxbudget``)."""
    base = user_cache_dir()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return base / "sessions" / f"{prefix}-{stamp}-{os.getpid()}.jsonl"


def budget_bar(floor: int, conversation: int, reserve: int, window: int) -> str:
    """``[floor|conversation|free|reserve]`` as rich markup, ``BAR_WIDTH`` cells wide."""
    free = max(0, window - reserve - floor - conversation)
    parts = [(floor, "blue", "█"), (conversation, "green", "█"), (free, "white", "·")]
    parts.append((min(reserve, window), "yellow", "▒"))
    total = max(1, sum(p[0] for p in parts))
    cells = [round(BAR_WIDTH * n / total) for n, _, _ in parts]
    cells[2] += BAR_WIDTH - sum(cells)
    return "".join(
        f"[{c}]{ch * max(0, k)}[/{c}]" for (_, c, ch), k in zip(parts, cells, strict=True)
    )


class BudgetView:
    """Prints a line per turn (budget bar) and each compaction, overflow and window change."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def event(self, event: LoopEvent) -> None:
        """The loop's event callback."""
        d = event.data
        if event.kind == "compaction":
            self.console.print(
                f"  [magenta]compacted[/magenta] {d['tokens_before']:,} → "
                f"{d['tokens_after']:,} tokens, {d['messages_before']} → "
                f"{d['messages_after']} msgs ({d['strategy']}; {d['trigger']})"
            )
        elif event.kind == "overflow":
            self.console.print(f"  [red]overflow[/red]: {d['message']}", markup=True)
        elif event.kind == "window_changed":
            self.console.print(f"  [red]window[/red] {d['old']:,} → {d['window']:,}: {d['reason']}")
        elif event.kind == "capped":
            self.console.print(f"  [red]compaction cap[/red] {d['cap']} reached this turn")

    def turn(self, agent: Agent) -> None:
        """One line for the turn just finished: the budget bar and its numbers."""
        tokens = agent.context_tokens()
        floor = agent.floor_tokens
        reserve = agent.window - agent.policy.threshold(agent.window)
        conversation = max(0, tokens - floor)
        free = max(0, agent.window - reserve - tokens)
        self.console.print(
            f"turn {agent.turn:>3} {budget_bar(floor, conversation, reserve, agent.window)} "
            f"floor {floor:,} | conv {conversation:,} | free {free:,} | reserve {reserve:,}"
        )


def print_summary(console: Console, summary: SessionSummary) -> None:
    """The table of compactions and the session's totals."""
    table = Table(
        title="compactions",
        caption="tokens: the whole request, floor included",
        show_lines=False,
    )
    for name in ("turn", "trigger", "strategy", "messages", "tokens"):
        table.add_column(name, no_wrap=True)
    for c in summary.compactions:
        table.add_row(
            str(c.turn),
            c.trigger.removeprefix("context_"),  # pressure / overflow
            c.strategy.replace("clear_tool_outputs", "clear"),
            f"{c.messages_before} → {c.messages_after}",
            f"{c.tokens_before:,} → {c.tokens_after:,}",
        )
    console.print(table)
    console.print(
        f"window {summary.window:,} | turns {summary.turns} | floor {summary.floor_tokens:,} | "
        f"largest request {summary.max_request_tokens:,}\n"
        f"overflows {summary.overflows} | compactions {len(summary.compactions)}"
    )
    if summary.archive:
        console.print(f"archive: {summary.archive}", soft_wrap=True)


def _warn_ignored(
    ctx: click.Context, asked: Mapping[str, Any], chosen: Mapping[str, Any], path: Path
) -> None:
    """Say which flags a resumed archive overrides: its own settings win."""
    for key, value in asked.items():
        source = ctx.get_parameter_source(key)
        if source == click.core.ParameterSource.COMMANDLINE and chosen.get(key) != value:
            click.echo(
                f"ctxbudget: resuming {path}: its {key} {chosen.get(key)!r} is kept"
                f" (--{key} {value!r} ignored; use a new --archive to change it)",
                err=True,
            )


def _write_html(archive: str, window: int, max_output: int, html: Path) -> None:
    from ctxbudget.replay.analyze import replay_file
    from ctxbudget.replay.html import write_html

    # The page replays the rule with the demo's own reply limit, so its line is the demo's.
    params = {"ctxbudget.max_output": max_output}
    write_html(replay_file(archive, "ctxbudget", windows=[window], params=params), html)


@click.command("demo")
@click.option("--window", type=int, default=None, help="Context window (default: 8192, chat 1200).")
@click.option("--turns", type=int, default=None, help="User turns to reach (default: 16, chat 17).")
@click.option("--scenario", type=click.Choice(SCENARIO_NAMES), default="coding", show_default=True)
@click.option("--policy", type=click.Choice(POLICY_NAMES), default="ctxbudget", show_default=True)
@click.option("--strategy", type=click.Choice(STRATEGY_NAMES), default="layered", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the session summary as JSON.")
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Session file (JSONL); an existing one is resumed. Default: a new file in the cache.",
)
@click.option(
    "--html",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the replay page of this session.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fake repo.")
@click.option("--counter", default=None, hidden=True, help="Loop counter (default: qwen3).")
@click.option("--step-delay", type=float, default=0.0, hidden=True, help="Seconds per call.")
def demo_command(
    window: int | None,
    turns: int | None,
    scenario: str,
    policy: str,
    strategy: str,
    as_json: bool,
    archive: Path | None,
    html: Path | None,
    seed: int,
    counter: str | None,
    step_delay: float,
) -> None:
    """Run the agent loop on the mock model: no network, no API key.

    \b
    Examples:
      ctxbudget demo                                   coding agent, window 8192
      ctxbudget demo --scenario chat --window 1200 --turns 17
      ctxbudget demo --policy pi --strategy truncate --json
      ctxbudget demo --archive run.jsonl               resume run.jsonl if it exists
      ctxbudget demo --html demo.html                  the replay page of the session
    """
    if turns is not None and turns < 1:
        raise ConfigError(f"--turns must be at least 1, got {turns}")
    console = Console(stderr=as_json, quiet=as_json, highlight=False)
    view = BudgetView(console)
    path = archive or default_archive_path()
    settings: dict[str, Any] = {
        "scenario": scenario,
        "window": DEFAULT_WINDOWS[scenario] if window is None else validate_window(window),
        "policy": policy,
        "strategy": strategy,
        "seed": seed,
    }
    with open_archive(
        path, settings, warn=lambda t: click.echo(f"ctxbudget: {t}", err=True)
    ) as opened:
        chosen = opened.settings
        _warn_ignored(click.get_current_context(), settings, chosen, path)
        provider = MockProvider(chosen["scenario"], seed=chosen["seed"], delay=step_delay)
        scene = provider.scenario
        assert scene is not None
        agent = Agent(
            provider,
            system=scene.system,
            tools=scene.tools,
            window=chosen["window"],
            policy=chosen["policy"],
            strategy=chosen["strategy"],
            counter=counter,
            tool_executor=scene.run_tool,
            archive=opened.archive,
            on_event=view.event,
            max_output_tokens=scene.max_output,
        )
        agent.restore(opened.state)
        want = turns or DEFAULT_TURNS[chosen["scenario"]]
        if opened.resumed:
            console.print(f"resuming {path} at turn {agent.turn} of {want}")
            if want <= agent.turn:
                click.echo(
                    f"ctxbudget: {path} is already at turn {agent.turn}; --turns is the total"
                    " to reach, so nothing more runs",
                    err=True,
                )
        agent.check_floor()
        if agent.pending():
            agent.finish_turn()
            view.turn(agent)
        while agent.turn < want:
            agent.run_turn(scene.user_message(agent.turn + 1))
            view.turn(agent)
        summary = agent.summary(path)
    if as_json:
        click.echo(json.dumps(summary.to_json(), ensure_ascii=False))
    else:
        print_summary(console, summary)
    if html is not None:
        _write_html(str(path), summary.window, get_scenario(chosen["scenario"]).max_output, html)
        if not as_json:
            console.print(f"page: {html}")
