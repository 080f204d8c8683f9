"""``hf:PATH`` equals transformers' ``apply_chat_template`` on every model folder the repo carries.

Each folder gets 110 generated requests here, each counted four ways (``count_request`` with the
folder as tokenizer, ``RequestCounter(model=...)``, the CLI with ``--tokenizer`` and with
``--model``), so >= 200 requests per folder and per door; the oracle is transformers 4.x.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.counting.conftest import HF_FOLDERS
from tests.counting.hf_oracle import bodies, oracle_count, run_cli

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.errors import InputError
from ctxbudget.messages.detect import parse_request_json

Oracle = Callable[[str], tuple[Path, Any]]


def _library(name: str, body: dict[str, Any]) -> tuple[int | None, int | None]:
    request = parse_request_json(json.dumps(body), "body")
    try:
        by_tokenizer = count_request(request, name).total
    except InputError:
        by_tokenizer = None
    try:
        by_model = RequestCounter(model=name).count(request).total
    except InputError:
        by_model = None
    return by_tokenizer, by_model


def _cli(flag: str, name: str, body: dict[str, Any], path: Path) -> int | None:
    path.write_text(json.dumps(body), encoding="utf-8")
    code, out, err = run_cli(["request", str(path), "--json", flag, name])
    if code == 2:  # the template refused the request, as transformers did
        assert len(err.strip().splitlines()) == 1, err
        return None
    assert code == 0, err
    tokens: int = json.loads(out)["tokens"]
    return tokens


@pytest.mark.parametrize("folder", HF_FOLDERS)
def test_every_door_counts_what_transformers_counts(
    folder: str, hf_oracle: Oracle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path, tokenizer = hf_oracle(folder)
    name = f"hf:{path}"
    body_file = tmp_path_factory.mktemp("oracle") / "body.json"
    seen = []

    @settings(
        max_examples=110, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(body=bodies())
    def check(body: dict[str, Any]) -> None:
        expected = oracle_count(tokenizer, body)
        assert _library(name, body) == (expected, expected), body
        assert _cli("--tokenizer", name, body, body_file) == expected, body
        assert _cli("--model", name, body, body_file) == expected, body
        seen.append(expected)

    check()
    assert len(seen) >= 110 and any(n is not None for n in seen)
