"""Score ``classify_error`` on the overflow corpus: recall, precision, windows read, TPM kind.

    PYTHONPATH=src .venv/bin/python scripts/overflow_score.py [--misses]

Point PYTHONPATH at another checkout's ``src`` to score that version on the same corpus (how
the before/after numbers of issue 13 were taken). ``--misses`` lists every wrong line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ctxbudget.errors import ContextOverflowError
from ctxbudget.providers.overflow import classify_error

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "overflow" / "corpus.jsonl"


def _verdict(row: dict[str, Any]) -> tuple[str, Any]:
    error = classify_error(row["status"], row["message"], provider=row["provider"])
    if isinstance(error, ContextOverflowError):
        return "overflow", error
    if type(error).__name__ == "RequestOverRateLimitError":
        return "rate_request_too_large", error
    return "none", error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list every wrong line")
    args = parser.parse_args()
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    tally = {"tp": 0, "fp": 0, "fn": 0, "limits": 0, "stated": 0, "wrong": 0, "tpm": 0}
    misses: list[str] = []
    for row in rows:
        verdict, error = _verdict(row)
        want = row["expected"] == "overflow"
        got = verdict == "overflow"
        tally["tp"] += want and got
        tally["fn"] += want and not got
        tally["fp"] += got and not want
        if want and row["limit"] is not None:
            tally["stated"] += 1
            tally["limits"] += got and error.limit == row["limit"]
        tally["wrong"] += got and error.limit is not None and error.limit != row["limit"]
        if row["expected"] == "rate_request_too_large" and verdict == row["expected"]:
            tally["tpm"] += (error.requested, error.limit) == (row["requested"], row["limit"])
        if verdict != row["expected"]:
            text = row["message"][:80]
            misses.append(f"{row['id']} expected {row['expected']}, got {verdict}: {text}")
    overflow = sum(row["expected"] == "overflow" for row in rows)
    tpm = sum(row["expected"] == "rate_request_too_large" for row in rows)
    print(f"overflow recall {tally['tp']}/{overflow}")
    print(f"non-overflow right {len(rows) - overflow - tally['fp']}/{len(rows) - overflow}")
    print(f"precision {tally['tp']}/{tally['tp'] + tally['fp']}")
    print(f"windows read {tally['limits']}/{tally['stated']}, wrong windows {tally['wrong']}")
    print(f"over-rate-limit requests recognised {tally['tpm']}/{tpm}")
    if args.misses:
        print("\n".join(misses))


if __name__ == "__main__":
    main()
