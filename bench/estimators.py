"""Estimators vs exact counts: ratio per kind of text and tokenizer, and speed vs tiktoken.

    .venv/bin/python bench/estimators.py [--repeat 15] [--short 200] [--medium 3000]
        [--before OLD_CALIBRATION_JSON]

Text: the real-text samples in tests/data/estimators (see SOURCES.md there). ``--before`` adds a
table of our calibrated models' ratios on every sample, JSON shapes included, with the weights of
an earlier calibration.json beside the current ones (e.g. ``git show REV:src/.../calibration.json``
into a file). Speed: the best of
``--repeat`` interleaved runs of each estimator and of exact tiktoken encoding of the same text
(cl100k_base, ``encode_ordinary`` through our registry), in one process, so load affects both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import corpus
import json_samples
from ctxbudget.tokens.calibrated import CALIBRATED_ESTIMATORS, CALIBRATED_NAMES, ESTIMATORS
from ctxbudget.tokens.charclass import FEATURES, CodepointTable, linear_estimator, unpack_classes
from ctxbudget.tokens.registry import get_tokenizer

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "estimators"
KINDS = corpus.SHIPPED_KINDS
JSON_KINDS = json_samples.JSON_KINDS
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


def models_of(calibration: Path) -> dict[str, Callable[[str], int]]:
    """Our calibrated models with the tables and weights of another calibration.json."""
    data = json.loads(calibration.read_text(encoding="utf-8"))
    models = {}
    for name in CALIBRATED_NAMES:
        weights = tuple(float(data["weights"][name].get(f, 0.0)) for f in FEATURES)
        table = CodepointTable(unpack_classes(data["tables"][data["table_of"][name]]))
        models[name] = linear_estimator(weights, table, name)
    return models


def before_after_table(texts: dict[str, str], before: dict[str, Callable[[str], int]]) -> list[str]:
    """Per sample, each calibrated model's ratio with the earlier weights -> the current ones;
    the generic model's to the largest of the three counts."""
    models = [n for n in CALIBRATED_NAMES if n != "ctxbudget"]
    head = [*models, "ctxbudget / largest of the three"]
    generic = CALIBRATED_ESTIMATORS["ctxbudget"]
    lines = ["| sample | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
    for kind, text in texts.items():
        exact = {t: get_tokenizer(t).count(text) for t in TOKENIZERS}
        cells = []
        for name in models:
            ref = exact[name.removeprefix("ctxbudget-")]
            old, new = before[name](text) / ref, CALIBRATED_ESTIMATORS[name](text) / ref
            cells.append(f"{old:.3f} → {new:.3f}")
        # its lowest ratio to any of the three is its ratio to the largest: one column holds both
        # sides of its band (>= 0.95 of each, <= 1.15 of the largest)
        old, new = (f(text) / max(exact.values()) for f in (before["ctxbudget"], generic))
        cells.append(f"{old:.3f} → {new:.3f}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
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
    parser.add_argument("--before", type=Path, help="an earlier calibration.json to compare")
    args = parser.parse_args()
    if args.before:
        every = {k: (CORPUS / f"{k}.txt").read_text("utf-8") for k in (*KINDS, *JSON_KINDS)}
        print("## Ours before -> after, every sample (JSON shapes included)\n")
        print("\n".join(before_after_table(every, models_of(args.before))))
        print()
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
