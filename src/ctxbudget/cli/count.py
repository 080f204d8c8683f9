"""``ctxbudget count`` and ``ctxbudget tokenizers``: count text, list tokenizers."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import click
from rich.console import Console
from rich.table import Table

from ctxbudget.cli.inputs import iter_text
from ctxbudget.errors import ConfigError
from ctxbudget.tokens import TokenCounter, counter_for_model, get_counter, tokenizer_infos
from ctxbudget.tokens.registry import TOKENIZER_NAMES, has_known_family
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


PIECE_CHARS = 1 << 18
"""An exact tokenizer is given at most about this many characters at once: its list of ids (36
bytes an id in Python) stays a few MB even for a chunk of text with no whitespace to cut at."""
SEARCH_CHARS = 1 << 16
"""How far back from ``PIECE_CHARS`` a cut between two pre-tokenizer pieces is looked for."""


def _cuts_between_pieces(before: str, after: str) -> bool:
    """Whether every shipped pre-tokenizer (cl100k, o200k, Qwen) starts a piece at ``after``.

    A letter or digit followed by a digit or letter of the other kind, or by punctuation or a
    symbol: their patterns end a letter run at a non-letter and a digit run at a non-digit, and
    punctuation never joins the run before it. Not ``'`` (o200k keeps ``don't`` whole), not two
    digits (cl100k groups digits by three from the run's start).
    """
    a, b = unicodedata.category(before)[0], unicodedata.category(after)[0]
    if a not in "LN" or after == "'":
        return False
    return (a != b and b in "LN") or b in "PS"


def bounded_pieces(
    text: str, limit: int = PIECE_CHARS, search: int = SEARCH_CHARS
) -> Iterator[str]:
    """``text`` in pieces of at most about ``limit`` characters, cut between pre-tokenizer pieces,
    so the exact counts of the pieces add up to the count of the whole.

    Where ``search`` characters before the limit hold no such cut (one pre-tokenizer piece longer
    than that, e.g. a 300 MB run of one letter), the text is cut at the limit: memory stays
    bounded, and the sum may then differ from the whole by a token or so per cut.
    """
    start = 0
    while len(text) - start > limit:
        end = start + limit
        floor = max(start + 1, end - search)
        pairs = (i for i in range(end, floor, -1) if _cuts_between_pieces(text[i - 1], text[i]))
        cut = next(pairs, end)
        yield text[start:cut]
        start = cut
    yield text[start:]


def count_source(source: str, counter: TokenCounter) -> FileCount:
    """Count one path (or ``-``), streaming it in chunks that no token crosses."""
    chars = size = tokens = 0
    # Only the shipped vocabularies' pre-tokenizers are known to allow the cuts above.
    split = counter.kind == "exact" and counter.name in TOKENIZER_NAMES
    for chunk in iter_text(source):
        chars += len(chunk.text)
        size += chunk.bytes
        pieces = bounded_pieces(chunk.text) if split else (chunk.text,)
        tokens += sum(counter.count(piece) for piece in pieces)
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
