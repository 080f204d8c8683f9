"""``ctxbudget estimators``: every estimator against the real token count of the same text."""

from __future__ import annotations

import json
import sys
from importlib import resources

import click
from rich.console import Console
from rich.table import Table

from ctxbudget.cli.inputs import iter_text
from ctxbudget.tokens import get_tokenizer
from ctxbudget.tokens.calibrated import ESTIMATORS

DEFAULT_REFERENCE = "cl100k_base"


def sample_text() -> str:
    """The packaged sample: real mixed Chinese/English/code text (source on its first line)."""
    return resources.files("ctxbudget.data").joinpath("sample.txt").read_text("utf-8")


def read_inputs(sources: tuple[str, ...]) -> tuple[str, bool]:
    """The texts of ``sources`` (paths or ``-``) joined, and whether it is the packaged sample:
    with no PATH, stdin is read unless it is a terminal or empty."""
    if not sources:
        piped = "" if sys.stdin.isatty() else "".join(c.text for c in iter_text("-"))
        return (piped, False) if piped else (sample_text(), True)
    return "".join(chunk.text for source in sources for chunk in iter_text(source)), False


def compare(text: str, reference: str) -> dict[str, object]:
    """The comparison in the JSON shape of the issue (a contract)."""
    exact = get_tokenizer(reference).count(text)
    rows = []
    for name, function in ESTIMATORS.items():
        tokens = function(text)
        ratio = round(tokens / exact, 4) if exact else None
        rows.append({"name": name, "tokens": tokens, "ratio": ratio})
    return {
        "reference": reference,
        "reference_tokens": exact,
        "chars": len(text),
        "estimators": rows,
    }


def _table(result: dict[str, object]) -> Table:
    table = Table(title=f"{result['reference_tokens']} tokens by {result['reference']}")
    for column in ("estimator", "tokens", "ratio"):
        table.add_column(column, justify="left" if column == "estimator" else "right")
    rows = result["estimators"]
    assert isinstance(rows, list)
    for row in rows:
        ratio = row["ratio"]
        style = "red" if ratio is not None and ratio < 1 else None  # under-counts overflow
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        table.add_row(row["name"], str(row["tokens"]), shown, style=style)
    return table


@click.command("estimators")
@click.argument("paths", nargs=-1)
@click.option(
    "--reference",
    default=DEFAULT_REFERENCE,
    show_default=True,
    help="Exact tokenizer to compare against (cl100k_base, o200k_base, qwen3, hf:PATH, ...).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def estimators_command(paths: tuple[str, ...], reference: str, as_json: bool) -> None:
    """Compare every token estimator with the exact count of PATHS (or stdin, '-').

    With no PATH and a terminal on stdin, a packaged sample of real mixed Chinese, English
    and Python text is used. Under-counts (ratio below 1) are shown in red.

    \b
    Examples:
      ctxbudget estimators
      ctxbudget estimators notes.md --reference qwen3
      cat prompt.txt | ctxbudget estimators - --json
    """
    text, is_sample = read_inputs(paths)
    result = compare(text, reference)
    if as_json:
        click.echo(json.dumps({**result, "sample": is_sample}, ensure_ascii=False))
    else:
        Console().print(_table(result))
        source = " (the packaged sample: pass a PATH or pipe text)" if is_sample else ""
        click.echo(f"{result['chars']:,} characters{source}")
