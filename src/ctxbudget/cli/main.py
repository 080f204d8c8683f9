"""The ``ctxbudget`` command: a click group; each command lives in its own module."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

import click

from ctxbudget import __version__
from ctxbudget.errors import CtxbudgetError

# (module, attribute) of each command, imported when the group is built.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("ctxbudget.cli.count", "count_command"),
    ("ctxbudget.cli.count", "tokenizers_command"),
    ("ctxbudget.cli.estimators", "estimators_command"),
    ("ctxbudget.cli.request", "request_command"),
    ("ctxbudget.cli.thresholds", "thresholds_command"),
    ("ctxbudget.cli.demo", "demo_command"),
    ("ctxbudget.cli.chat", "chat_command"),
    ("ctxbudget.cli.replay", "replay_command"),
    ("ctxbudget.cli.serve", "serve_command"),
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ctxbudget")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Keep LLM agent conversations inside the model's context window.

    \b
    Examples:
      ctxbudget demo                         the agent loop on the embedded mock model
      ctxbudget count README.md --tokenizer qwen3
      ctxbudget estimators notes.txt         every estimator vs the real count
      ctxbudget thresholds --window 200000   where each harness compacts
      ctxbudget replay session.jsonl --html report.html
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    for module_name, attribute in COMMANDS:
        module = importlib.import_module(module_name)
        command = getattr(module, attribute)
        if command.short_help is None and command.help:
            # The docstring's whole first line, not click's 45-character cut.
            command.short_help = command.help.strip().splitlines()[0].rstrip(".")
        cli.add_command(command)


_register()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI: a ``CtxbudgetError`` becomes one line on stderr and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("CTXBUDGET_DEBUG") == "1"
    if "--debug" in args:  # accepted anywhere on the line, not only before the command
        args = ["--debug", *(a for a in args if a != "--debug")]
    try:
        cli.main(args=args, prog_name="ctxbudget", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("ctxbudget: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        message = exc.format_message().splitlines()[0] if exc.format_message() else str(exc)
        command = next((a for a in args if a in cli.commands), None)
        where = f"ctxbudget {command} --help" if command else "ctxbudget --help"
        click.echo(f"ctxbudget: {message} (see {where})", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except CtxbudgetError as exc:
        if debug:
            raise
        click.echo(f"ctxbudget: {_one_line(str(exc))}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("ctxbudget: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:
        if debug:
            raise
        click.echo(f"ctxbudget: {_one_line(str(exc))}", err=True)
        sys.exit(2)
    except Exception as exc:  # a bug: say so in one line; --debug shows the traceback
        if debug:
            raise
        click.echo(
            f"ctxbudget: internal error: {type(exc).__name__}: {_one_line(str(exc))}"
            " (rerun with --debug for the traceback, and please report it)",
            err=True,
        )
        sys.exit(1)


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "error"


if __name__ == "__main__":
    main()
