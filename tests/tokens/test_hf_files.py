"""A model folder is untrusted input: its files' sizes are checked before any is read, and its
tokenizer.json's own regexes are refused when they are slow or fail, each with one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.child import GIB, one_line_error, run_cli

from ctxbudget.counting.sandbox import Limits, run_bounded
from ctxbudget.errors import InputError
from ctxbudget.tokens.hf_folder import CONFIG_JSON_BYTES, TOKENIZER_JSON_BYTES
from ctxbudget.tokens.registry import ExactTokenizer, get_tokenizer, hf_added_tokens


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (reading it would take ``size`` of memory)."""
    with path.open("wb") as f:
        f.truncate(size)
    return path


def tiny_tokenizer(regex: str) -> dict[str, object]:
    """A tokenizer.json of two tokens that splits by ``regex`` as byte-level BPE folders do."""
    split = {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}  # fmt: skip
    return {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"},
    }


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A small model folder to spoil (loading the real ones takes seconds)."""
    root = tmp_path / "model"
    root.mkdir()
    (root / "tokenizer.json").write_text(json.dumps(tiny_tokenizer(r"\p{L}+|\s+|.")), "utf-8")
    (root / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    return root


@pytest.fixture
def small(tmp_path: Path) -> Path:
    text = tmp_path / "small.txt"
    text.write_text("hello world\n", encoding="utf-8")
    return text


def test_a_1_gb_tokenizer_config_is_refused_before_it_is_read(folder: Path, small: Path) -> None:
    """It took 2.2 GB and 16 s to refuse (5 GB: MemoryError); now a look at its size."""
    sparse(folder / "tokenizer_config.json", GIB)
    run = run_cli("count", "--tokenizer", f"hf:{folder}", str(small), timeout=60)
    line = one_line_error(run)
    assert "tokenizer_config.json" in line and f"{CONFIG_JSON_BYTES >> 20} MiB" in line


def test_a_2_gb_tokenizer_json_is_refused_before_it_is_read(folder: Path, small: Path) -> None:
    sparse(folder / "tokenizer.json", 2 * GIB)
    run = run_cli("count", "--tokenizer", f"hf:{folder}", str(small), timeout=60)
    line = one_line_error(run)
    assert "tokenizer.json" in line and f"{TOKENIZER_JSON_BYTES >> 20} MiB" in line
    started = time.perf_counter()
    with pytest.raises(InputError, match="MiB"):
        hf_added_tokens(folder)
    assert time.perf_counter() - started < 1


def _with_regex(folder: Path, regex: str) -> Path:
    (folder / "tokenizer.json").write_text(json.dumps(tiny_tokenizer(regex)), encoding="utf-8")
    return folder


def test_the_small_folder_counts(folder: Path, small: Path) -> None:
    """The folder the tests below spoil works as it is (its regex is probed and passes)."""
    run = run_cli("count", "--tokenizer", f"hf:{folder}", str(small), "--json", timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["tokens"] == 4  # hello, " ", world, "\n": one token each


def test_a_backtracking_regex_is_refused_not_run_for_minutes(folder: Path, tmp_path: Path) -> None:
    """``a{0,2000}a{0,2000}c|.`` took over 60 s on a 20 KB file, with no deadline."""
    _with_regex(folder, "a{0,2000}a{0,2000}c|.")
    text = tmp_path / "a.txt"
    text.write_text("a" * 20_000, encoding="utf-8")
    started = time.perf_counter()
    run = run_cli("count", "--tokenizer", f"hf:{folder}", str(text), timeout=60)
    assert "too slow" in one_line_error(run)
    assert time.perf_counter() - started < 30  # measured: under 2 s


def test_a_regex_that_panics_is_one_line_not_a_traceback(folder: Path, small: Path) -> None:
    """The regex engine's retry limit raises ``PanicException``, a BaseException: it escaped
    every handler, with Rust's own report on stderr."""
    _with_regex(folder, r"(\s+)+x|.")
    run = run_cli("count", "--tokenizer", f"hf:{folder}", str(small), timeout=60)
    line = one_line_error(run)
    assert "retry-limit" in line and "regex" in line


def test_a_deadline_passing_in_the_tokenizer_names_the_tokenizer() -> None:
    """A step's tokenising runs under the chat template's deadline: when it is the slow part
    the error says so (it blamed the template)."""

    def slow(text: str) -> list[int]:
        end = time.monotonic() + 5
        while time.monotonic() < end:  # Python code: the watchdog's exception lands here
            pass
        return [0]

    tokenizer = ExactTokenizer("hf:slow", slow, slow, vocab_size=1, special_in_text=True)
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"^hf:slow: tokenising 5 characters ran past"):
        run_bounded(lambda: tokenizer.count_special("hello"), Limits(seconds=0.2))
    assert time.perf_counter() - started < 2


def test_a_panic_past_the_probes_is_an_input_error(folder: Path) -> None:
    """A regex that passes the load-time probes (none holds a Greek letter) but hits the regex
    engine's retry limit on a text: the ``PanicException`` becomes an ``InputError``."""
    spoiled = _with_regex(folder, r"(\p{Greek}+)+x|.")
    tokenizer = get_tokenizer(f"hf:{spoiled}")
    assert tokenizer.count("ab") == 2
    with pytest.raises(InputError, match="the tokenizer failed on a text of 40 characters"):
        tokenizer.count("α" * 40)
