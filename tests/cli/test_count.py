"""``ctxbudget count`` / ``tokenizers`` and the chunked text reader under them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from ctxbudget.cli.count import count_command, tokenizers_command
from ctxbudget.cli.inputs import iter_text
from ctxbudget.errors import InputError
from ctxbudget.tokens import get_tokenizer

runner = CliRunner()


def test_count_json_contract(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("hello world\n你好，世界\n", encoding="utf-8")
    b = tmp_path / "b.txt"
    b.write_text("def f(x):\n    return x + 1\n", encoding="utf-8")
    result = runner.invoke(count_command, [str(a), str(b), "--tokenizer", "qwen3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["counter"] == "qwen3" and out["kind"] == "exact"
    tok = get_tokenizer("qwen3")
    for entry, path in zip(out["files"], (a, b), strict=True):
        text = path.read_text(encoding="utf-8")
        assert entry == {
            "path": str(path),
            "chars": len(text),
            "bytes": len(text.encode()),
            "tokens": tok.count(text),
        }
    assert out["tokens"] == sum(f["tokens"] for f in out["files"])


def test_count_reads_stdin_and_says_model_estimates(tmp_path: Path) -> None:
    result = runner.invoke(count_command, ["-", "--model", "gpt-4o", "--json"], input="hi there")
    out = json.loads(result.output)
    assert out["counter"] == "o200k_base" and out["tokens"] == 2
    result = runner.invoke(count_command, ["-", "--model", "claude-sonnet-4"], input="hi there")
    assert result.exit_code == 0 and "estimate" in result.output


def test_count_rejects_two_counter_flags() -> None:
    result = runner.invoke(count_command, ["-", "--tokenizer", "qwen3", "--model", "gpt-4o"])
    assert result.exit_code != 0


def test_tokenizers_json_lists_every_registered_tokenizer() -> None:
    out = json.loads(runner.invoke(tokenizers_command, ["--json"]).output)
    rows = {row["name"]: row for row in out["tokenizers"]}
    assert set(rows) == {"cl100k_base", "o200k_base", "qwen3", "qwen2.5", "qwen3.6"}
    assert rows["qwen2.5"]["aliases"] == ["qwen2"]
    for name, row in rows.items():
        assert row["vocab_size"] == get_tokenizer(name).vocab_size
        assert row["available"] is True
        assert set(row) >= {"name", "aliases", "vocab_size", "package", "available"}


def test_chunked_reading_counts_the_same_as_one_piece(tmp_path: Path) -> None:
    text = "".join(
        f"line {i}: 天气不错 déjà vu {'x' * (i % 7)}  \n\n  indented {i}\n" for i in range(3000)
    )
    path = tmp_path / "big.txt"
    path.write_text(text, encoding="utf-8")
    chunks = list(iter_text(str(path), chunk_bytes=4096))
    assert len(chunks) > 10
    assert "".join(c.text for c in chunks) == text
    assert sum(c.bytes for c in chunks) == len(text.encode())
    for name in ("cl100k_base", "o200k_base", "qwen3"):
        tok = get_tokenizer(name)
        assert sum(tok.count(c.text) for c in chunks) == tok.count(text), name


@given(st.text(alphabet=st.sampled_from(list("ab 中\n\t.é🙂")), max_size=400))
def test_chunking_never_changes_text_or_exact_counts(text: str) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode("utf-8"))
    chunks = list(iter_text(f.name, chunk_bytes=7))
    Path(f.name).unlink()
    assert "".join(c.text for c in chunks) == text
    tok = get_tokenizer("cl100k_base")
    assert sum(tok.count(c.text) for c in chunks) == tok.count(text)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"abc\xff\xfedef", "not UTF-8 text (invalid byte at offset 3)"),
        (b"ab\x00cd", "binary data (NUL byte at offset 2)"),
    ],
)
def test_bad_text_files_are_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        list(iter_text(str(path)))


def test_missing_path_and_directory_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        list(iter_text(str(tmp_path / "nope.txt")))
    with pytest.raises(InputError, match="is a directory"):
        list(iter_text(str(tmp_path)))


def test_empty_file_counts_zero(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    out = json.loads(runner.invoke(count_command, [str(path), "--json"]).output)
    assert out["tokens"] == 0 and out["files"][0]["chars"] == 0


def test_a_file_under_one_chunk_is_counted_in_one_piece(tmp_path: Path) -> None:
    """Estimators round per piece: a small file must not be split, or counts drift by one."""
    text = "\n".join(f"line {i} of a short file" for i in range(500))
    path = tmp_path / "small.txt"
    path.write_text(text, encoding="utf-8")
    assert [c.text for c in iter_text(str(path))] == [text]
