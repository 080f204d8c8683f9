"""``ctxbudget estimators``: every estimator against the real token count of the same text."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ctxbudget.cli.inputs import iter_text
from ctxbudget.extras import pyplot
from ctxbudget.tokens import get_tokenizer
from ctxbudget.tokens.calibrated import ESTIMATORS

DEFAULT_REFERENCE = "cl100k_base"
BAND = (0.95, 1.10)
"""The band our per-tokenizer estimators keep (drawn on the plot)."""


def sample_text() -> str:
    """The packaged sample: real mixed Chinese/English/code text (source on its first line)."""
    return resources.files("ctxbudget.data").joinpath("sample.txt").read_text("utf-8")


def _measure(chunks: Iterable[str], reference: str) -> tuple[int, int, dict[str, int]]:
    """(characters, exact tokens, tokens per estimator) of a text given as chunks.

    One chunk at a time, so memory does not grow with the text: a text longer than one chunk
    (``iter_text``'s 1 MiB) is estimated chunk by chunk, each estimator's counts summed, as a
    harness counts message by message.
    """
    count = get_tokenizer(reference).count
    chars = exact = 0
    tokens = dict.fromkeys(ESTIMATORS, 0)
    for text in chunks:
        chars += len(text)
        exact += count(text)  # cut in bounded pieces by the tokenizer itself
        for name, function in ESTIMATORS.items():
            tokens[name] += function(text)
    return chars, exact, tokens


def _result(reference: str, chars: int, exact: int, tokens: dict[str, int]) -> dict[str, object]:
    rows = [
        {"name": name, "tokens": n, "ratio": round(n / exact, 4) if exact else None}
        for name, n in tokens.items()
    ]
    return {"reference": reference, "reference_tokens": exact, "chars": chars, "estimators": rows}


def compare(text: str, reference: str) -> dict[str, object]:
    """The comparison in the JSON shape of the issue (a contract)."""
    return _result(reference, *_measure([text], reference))


def _chunks(source: str) -> Iterator[str]:
    return (chunk.text for chunk in iter_text(source))


def _piped_chunks() -> Iterator[str] | None:
    """Stdin's chunks when it is piped and not empty, else None (then the sample is used)."""
    if sys.stdin.isatty():
        return None
    chunks = _chunks("-")
    first = next(chunks, "")
    return itertools.chain([first], chunks) if first else None


def compare_sources(
    sources: tuple[str, ...], reference: str, stdin: Iterable[str] | None = None
) -> dict[str, object]:
    """``compare`` of all ``sources`` together, streamed, with each source's own row in
    ``texts`` (an added field: the top-level fields keep their meaning). ``stdin``: the chunks
    of ``-`` when they have been started already."""
    texts = []
    chars = exact = 0
    tokens = dict.fromkeys(ESTIMATORS, 0)
    for source in sources:
        chunks = stdin if source == "-" and stdin is not None else _chunks(source)
        c, e, t = _measure(chunks, reference)
        texts.append({"path": source, **_result(reference, c, e, t)})
        chars, exact = chars + c, exact + e
        tokens = {name: tokens[name] + t[name] for name in tokens}
    return {**_result(reference, chars, exact, tokens), "texts": texts}


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


def write_plot(texts: list[dict[str, object]], reference: str, path: str | Path) -> Path:
    """One row per text, one marker per estimator at its ratio to the exact count; the
    under-count side shaded, our band drawn. Returns the path."""
    plt = pyplot("estimators --plot")

    names = list(ESTIMATORS)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(texts) + 0.18 * len(names)))
    ax.axvspan(0, 1, color="#d62728", alpha=0.08, lw=0)
    ax.axvspan(*BAND, color="#2ca02c", alpha=0.15, lw=0)
    ax.axvline(1, color="#444444", lw=1)
    markers = "os^vD<>ph*X8"
    highest = 1.5
    for i, name in enumerate(names):
        xs, ys = [], []
        for row, text in enumerate(texts):
            rows = text["estimators"]
            assert isinstance(rows, list)
            ratio = next(r["ratio"] for r in rows if r["name"] == name)
            if ratio is not None:
                xs.append(ratio)
                ys.append(row + (i - (len(names) - 1) / 2) * 0.06)
                highest = max(highest, ratio)
        ours = name.startswith("ctxbudget")
        ax.scatter(
            xs,
            ys,
            marker=markers[i % len(markers)],
            s=42 if ours else 26,
            label=name,
            zorder=3,
            edgecolors="black" if ours else "none",
        )
    labels = [Path(str(t["path"])).stem or str(t["path"]) for t in texts]
    ax.set_yticks(range(len(texts)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, min(highest * 1.05, 3))
    ax.set_xlabel(
        f"estimate / exact {reference} tokens   (left of 1: under-count, the overflow side)"
    )
    ax.set_title(f"estimators vs {reference}; green: our band {BAND[0]}-{BAND[1]}", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.3 / (1 + len(texts)), 1, 1))
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


@click.command("estimators")
@click.argument("paths", nargs=-1)
@click.option(
    "--reference",
    default=DEFAULT_REFERENCE,
    show_default=True,
    help="Exact tokenizer to compare against (cl100k_base, o200k_base, qwen3, hf:PATH, ...).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    help="Write a PNG: one row per PATH, each estimator's ratio to the exact count.",
)
def estimators_command(
    paths: tuple[str, ...], reference: str, as_json: bool, plot_path: str | None
) -> None:
    """Compare every token estimator with the exact count of PATHS (or stdin, '-').

    With no PATH and a terminal on stdin, a packaged sample of real mixed Chinese, English
    and Python text is used. Under-counts (ratio below 1) are shown in red. Files are read in
    1 MiB chunks (estimated chunk by chunk), so a file of any size fits in memory.

    \b
    Examples:
      ctxbudget estimators
      ctxbudget estimators notes.md --reference qwen3
      ctxbudget estimators tests/data/estimators/*.txt --plot estimators.png
      cat prompt.txt | ctxbudget estimators - --json
    """
    piped = _piped_chunks() if not paths else None
    if paths or piped is not None:
        result, is_sample = compare_sources(paths or ("-",), reference, piped), False
    else:
        result, is_sample = compare(sample_text(), reference), True
        result["texts"] = [{"path": "sample", **result}]
    if plot_path:
        texts = result["texts"]
        assert isinstance(texts, list)
        write_plot(texts, reference, plot_path)
        click.echo(f"plot: {plot_path}", err=True)
    if as_json:
        click.echo(json.dumps({**result, "sample": is_sample}, ensure_ascii=False))
    else:
        Console().print(_table(result))
        source = " (the packaged sample: pass a PATH or pipe text)" if is_sample else ""
        click.echo(f"{result['chars']:,} characters{source}")
