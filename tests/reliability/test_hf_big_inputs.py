"""Huge texts through ``hf:`` tokenizers: no abort, no panic, bounded memory, exact counts.

Each run is a child process under a 1 GiB address-space limit: before the tokenizer layer cut
long texts, ``tokenizers`` aborted the interpreter ("memory allocation of 1744830464 bytes
failed", exit 134) on 10 MB of digits, and raised ``PanicException`` (a BaseException) on one
10M-space message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.child import GIB, run_cli, run_python

from ctxbudget.counting import count_request
from ctxbudget.messages.detect import parse_request_json
from ctxbudget.tokens.registry import get_tokenizer

pytestmark = pytest.mark.reliability

MB = 1 << 20
TIMEOUT = 500  # measured: 15-40 s each on a busy 2-core machine


def _body(content: str | None = None, arguments: str | None = None) -> dict[str, object]:
    if arguments is None:
        return {"messages": [{"role": "user", "content": content}]}
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": arguments}}
    return {"messages": [{"role": "user", "content": "go"},
                         {"role": "assistant", "content": None, "tool_calls": [call]}]}  # fmt: skip


def _total(folder: Path, body: dict[str, object]) -> int:
    return count_request(parse_request_json(json.dumps(body), "body"), model=f"hf:{folder}").total


def _extrapolated(count: Callable[[int], int], n: int) -> int:
    """``count(n)`` for a text of ``n`` repeats of a unit that ends where a pre-token ends: the
    count is linear in ``n``, so two small counts give it."""
    small, double = count(1000), count(2000)
    return small + (double - small) * (n - 1000) // 1000


@pytest.mark.parametrize(
    ("name", "unit"),
    [("qwen2.5", "7"), ("smollm3-template", "7"), ("llama3-cl100k", "ab12")],
)
def test_count_of_4_mb_without_whitespace(
    hf_folder: Callable[[str], Path], tmp_path: Path, name: str, unit: str
) -> None:
    """Qwen and SmolLM3 make each digit a token; Llama 3 cuts ``ab12`` in two pre-tokens."""
    folder = hf_folder(name)
    n = 4 * MB // len(unit)
    big = tmp_path / "big.txt"
    big.write_text(unit * n, encoding="utf-8")
    tokenizer = get_tokenizer(f"hf:{folder}")
    expected = _extrapolated(lambda k: tokenizer.count(unit * k), n)
    run = run_cli("count", "--tokenizer", f"hf:{folder}", str(big), "--json", timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["tokens"] == expected


@pytest.mark.parametrize("name", ["qwen2.5", "smollm3-template"])
def test_request_with_a_12_mb_message_of_code(
    hf_folder: Callable[[str], Path], tmp_path: Path, name: str
) -> None:
    """SmolLM3's template is rendered by Jinja, and its count tokenises under the render's
    deadline: a fixed 10 s failed this (legitimate, if huge) message on a busy machine; the
    deadline now grows with the input at the tokenizer's own pace."""
    folder = hf_folder(name)
    unit = "x=1;"  # no whitespace: cut between "1" and ";" (a digit, then punctuation)
    n = 12 * MB // len(unit)
    expected = _extrapolated(lambda k: _total(folder, _body(unit * k)), n)
    path = tmp_path / "request.json"
    path.write_text(json.dumps(_body(unit * n)), encoding="utf-8")
    run = run_cli("request", str(path), "--model", f"hf:{folder}", "--json", timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["tokens"] == expected


LIBRARY = """
import json, sys
from ctxbudget.counting import count_request
from ctxbudget.messages.detect import parse_request_json
with open(sys.argv[2], encoding="utf-8") as f:
    text = f.read()
print(count_request(parse_request_json(text, "body"), model=sys.argv[1]).total)
"""


def _library_total(folder: Path, body: dict[str, object], tmp_path: Path) -> int:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    run = run_python(LIBRARY, f"hf:{folder}", str(path), memory=GIB + GIB // 2, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-2000:]
    return int(run.stdout)


def test_library_counts_4_mb_of_tool_call_arguments(
    hf_folder: Callable[[str], Path], tmp_path: Path
) -> None:
    folder = hf_folder("qwen2.5")
    n = 4 * MB
    expected = _extrapolated(lambda k: _total(folder, _body(arguments="7" * k)), n)
    assert _library_total(folder, _body(arguments="7" * n), tmp_path) == expected


def test_library_counts_a_10m_space_message(
    hf_folder: Callable[[str], Path], tmp_path: Path
) -> None:
    """One pre-token of 10M spaces (it raised ``PanicException``): no exact cut exists in a run
    of spaces, so it is cut at the piece limit, each piece a few thousand space tokens."""
    folder = hf_folder("qwen2.5")
    n = 10_000_000
    total = _library_total(folder, _body(" " * n), tmp_path)
    assert n // 256 < total < n // 32  # measured: 78,156 (Qwen's longest space token: 128)


ADDED = """
import json, sys, time
from ctxbudget.counting import count_request
from ctxbudget.messages.detect import parse_request_json
from ctxbudget.tokens.registry import get_tokenizer
get_tokenizer(sys.argv[1])
text = "words of a message, aa_0 and dy_99999 here. " * 2700  # 120 KB, two added tokens a line
body = {"messages": [{"role": "user", "content": text}]}
started = time.perf_counter()
total = count_request(parse_request_json(json.dumps(body), "body"), model=sys.argv[1]).total
print(json.dumps({"total": total, "seconds": time.perf_counter() - started}))
"""


def test_100k_added_tokens_and_a_long_one_count_a_120_kb_message(
    hf_folder: Callable[[str], Path], tmp_path: Path
) -> None:
    """One added token over 256 characters made the splitter a 100,000-way alternation: the
    message took 76 s, then failed blaming the chat template's deadline."""
    folder = tmp_path / "extended"
    folder.mkdir()
    source = hf_folder("llama3-cl100k")  # a Jinja template: its steps tokenise under its deadline
    for name in ("tokenizer.json", "chat_template.jinja"):
        (folder / name).symlink_to(source / name)
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    flags = {"lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
    letters = "abcdefghijklmnopqrstuvwxyz"  # first characters that plain text holds
    tokens = [f"{letters[i % 26]}{letters[i // 26 % 26]}_{i}" for i in range(100_000)]
    tokens.append("<" + "long" * 100 + ">")
    for i, token in enumerate(tokens):
        config["added_tokens_decoder"][str(128_256 + i)] = {"content": token, **flags}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    run = run_python(ADDED, f"hf:{folder}", memory=2 * GIB, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["total"] > 20_000
    assert result["seconds"] < 20  # measured: about 1 s (the folder loads in ~25 s)
