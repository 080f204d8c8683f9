"""Estimators vs exact counts: ratio per kind of text and tokenizer, and speed vs tiktoken.

    .venv/bin/python bench/estimators.py [--repeat 15] [--short 200] [--medium 3000]

Text: the real-text samples in tests/data/estimators (see SOURCES.md there). Speed: the best of
``--repeat`` interleaved runs of each estimator and of exact tiktoken encoding of the same text
(cl100k_base, ``encode_ordinary`` through our registry), in one process, so load affects both.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import corpus
from ctxbudget.tokens.calibrated import ESTIMATORS
from ctxbudget.tokens.registry import get_tokenizer

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "estimators"
KINDS = corpus.SHIPPED_KINDS
TOKENIZERS = ("cl100k_base", "o200k_base", "qwen3")


def best_time(function: Callable[[str], object], text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function(text)
        best = min(best, time.perf_counter() - start)
    return best


def ratio_table(texts: dict[str, str]) -> list[str]:
    exact = {(t, k): get_tokenizer(t).count(texts[k]) for t in TOKENIZERS for k in KINDS}
    head = "| estimator | tokenizer | " + " | ".join(KINDS) + " |"
    lines = [head, "|" + "---|" * (len(KINDS) + 2)]
    for name, function in ESTIMATORS.items():
        ests = {k: function(texts[k]) for k in KINDS}
        for tok in TOKENIZERS:
            if name.startswith("ctxbudget-") and name != f"ctxbudget-{tok}":
                continue
            cells = [f"{ests[k] / exact[tok, k]:.3f}" for k in KINDS]
            lines.append(f"| {name} | {tok} | " + " | ".join(cells) + " |")
    generic = {k: ESTIMATORS["ctxbudget"](texts[k]) for k in KINDS}
    largest = {k: max(exact[t, k] for t in TOKENIZERS) for k in KINDS}
    cells = [f"{generic[k] / largest[k]:.3f}" for k in KINDS]
    lines.append("| ctxbudget | largest of the three | " + " | ".join(cells) + " |")
    lines.append("| (exact tokens) | | " + " | ".join("" for _ in KINDS) + " |")
    for tok in TOKENIZERS:
        lines.append(f"| exact | {tok} | " + " | ".join(str(exact[tok, k]) for k in KINDS) + " |")
    return lines


def speed_table(texts: dict[str, str], repeat: int) -> list[str]:
    encode = get_tokenizer("cl100k_base").count
    lines = ["| estimator | " + " | ".join(texts) + " |", "|" + "---|" * (len(texts) + 1)]
    for function in ESTIMATORS.values():  # warm caches and numpy's import
        function("warm up")
    for name, function in ESTIMATORS.items():
        cells = []
        for text in texts.values():
            pairs = [
                (best_time(encode, text, 1), best_time(function, text, 1)) for _ in range(repeat)
            ]
            exact_s = min(p[0] for p in pairs)
            est_s = min(p[1] for p in pairs)
            cells.append(f"{exact_s / est_s:.1f}x ({est_s * 1e6:.1f} µs)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    times = [f"{best_time(encode, t, repeat) * 1e6:.0f} µs" for t in texts.values()]
    lines.append("| exact cl100k_base encode | " + " | ".join(times) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--short", type=int, default=200, help="characters of the short samples")
    parser.add_argument("--medium", type=int, default=3000, help="characters of the medium ones")
    args = parser.parse_args()
    texts = {k: (CORPUS / f"{k}.txt").read_text(encoding="utf-8") for k in KINDS}
    print("## Ratio estimate / exact tokens, whole sample of each kind\n")
    print("\n".join(ratio_table(texts)))
    sizes = ", ".join(f"{k} {len(texts[k])}" for k in KINDS)
    print(f"\n## Speed: times faster than exact encoding, whole samples ({sizes} chars)\n")
    print("\n".join(speed_table(texts, args.repeat)))
    for size, repeat in ((args.medium, args.repeat * 4), (args.short, args.repeat * 20)):
        pieces = {f"{k}[:{size}]": texts[k][:size] for k in KINDS}
        print(f"\n## Speed: times faster than exact encoding, first {size} chars\n")
        print("\n".join(speed_table(pieces, repeat)))


if __name__ == "__main__":
    main()
