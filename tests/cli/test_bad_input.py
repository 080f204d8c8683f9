"""Bad input on the command line: exit code 2, one line on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxbudget.cli.main import main

Maker = Callable[[Path], str]


def missing(tmp: Path) -> str:
    return str(tmp / "does-not-exist.json")


def directory(tmp: Path) -> str:
    return str(tmp)


def empty(tmp: Path) -> str:
    path = tmp / "empty.json"
    path.write_bytes(b"")
    return str(path)


def binary(tmp: Path) -> str:
    path = tmp / "blob.bin"
    path.write_bytes(bytes(range(256)) * 64)
    return str(path)


def bad_utf8(tmp: Path) -> str:
    path = tmp / "latin1.json"
    path.write_bytes('{"messages": [{"role": "user", "content": "caf\xe9"}]}'.encode("latin-1"))
    return str(path)


def truncated(tmp: Path) -> str:
    path = tmp / "truncated.json"
    path.write_text('{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi', "utf-8")
    return str(path)


def huge_single_line(tmp: Path) -> str:
    """A 50 MB single-line JSON document of the wrong shape for every command."""
    path = tmp / "huge.json"
    row = json.dumps({"role": "narrator", "content": "x" * 1000})
    with path.open("w", encoding="utf-8") as f:
        f.write("[")
        f.write(",".join([row] * 50_000))
        f.write("]")
    assert path.stat().st_size > 50_000_000
    return str(path)


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    code = info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def assert_one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxbudget: ")
    assert "Traceback" not in err


FILE_CASES = [missing, directory, binary, bad_utf8]


@pytest.mark.parametrize("make", FILE_CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("command", ["count", "estimators"])
def test_text_commands_reject_bad_files(
    command: str, make: Maker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_one_line_error(*run_main([command, make(tmp_path)], capsys))


@pytest.mark.parametrize(
    "make", [*FILE_CASES, empty, truncated, huge_single_line], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("command", ["request", "replay"])
def test_json_commands_reject_bad_files(
    command: str, make: Maker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_one_line_error(*run_main([command, make(tmp_path), "--json"], capsys))


# Past 100M tokens (ten times the largest window on offer) a window is a typo: 2^63 and more
# once ended replay in "internal error: OverflowError".
HUGE_WINDOWS = ["100000001", "9223372036854775808", "100000000000000000000"]


@pytest.mark.parametrize("window", ["0", "-5", "abc", "nan", "inf", "1e400", *HUGE_WINDOWS])
@pytest.mark.parametrize("command", ["thresholds", "demo"])
def test_bad_windows(command: str, window: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_error(*run_main([command, "--window", window, "--json"], capsys))


@pytest.mark.parametrize("window", ["0", *HUGE_WINDOWS])
def test_replay_refuses_a_huge_window_flag(
    window: str, traces_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = str(next(traces_dir.glob("codex-cli_*.jsonl")))
    code, err = run_main(["replay", trace, "--window", window, "--json"], capsys)
    assert_one_line_error(code, err)
    assert "--window must be" in err


@pytest.mark.parametrize(
    "args",
    [
        ["count", "-", "--tokenizer", "cl300k"],
        ["count", "-", "--estimator", "chars-by-five"],
        ["estimators", "-", "--reference", "gpt2-ish"],
        ["request", "-", "--tokenizer", "nope"],
        ["demo", "--policy", "nope", "--json"],
        ["demo", "--strategy", "nope", "--json"],
        ["demo", "--scenario", "nope", "--json"],
        ["replay", "TRACE", "--policy", "nope"],
        ["replay", "TRACE", "--format", "nope"],
        ["replay", "TRACE", "--window", "-1"],
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_unknown_names(
    args: list[str], traces_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = str(next(traces_dir.glob("claude-code_*.jsonl")))
    args = [trace if a == "TRACE" else a for a in args]
    assert_one_line_error(*run_main(args, capsys))


def test_a_real_process_prints_no_traceback(tmp_path: Path) -> None:
    cases = [
        ["count", missing(tmp_path)],
        ["request", truncated(tmp_path)],
        ["thresholds", "--window", "-1"],
        ["replay", binary(tmp_path)],
    ]
    for args in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "ctxbudget.cli.main", *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def symlink_loop(tmp: Path) -> str:
    (tmp / "a.txt").symlink_to(tmp / "b.txt")
    (tmp / "b.txt").symlink_to(tmp / "a.txt")
    return str(tmp / "a.txt")


def utf16(tmp: Path, encoding: str) -> str:
    path = tmp / f"{encoding}.txt"
    path.write_bytes('{"messages": [{"role": "user", "content": "hi"}]}\n'.encode(encoding))
    return str(path)


@pytest.mark.parametrize(
    ("encoding", "named"),
    [("utf-16", "UTF-16"), ("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE")],
)
@pytest.mark.parametrize("command", ["count", "estimators", "request"])
def test_utf16_text_is_named_with_how_to_convert(
    command: str, encoding: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = utf16(tmp_path, encoding)
    code, err = run_main([command, source], capsys)
    assert_one_line_error(code, err)
    assert f"{source}: {named} text, not UTF-8" in err
    assert f"iconv -f {named} -t UTF-8 {source}" in err
    converted = tmp_path / "converted.txt"
    iconv = subprocess.run(["iconv", "-f", named, "-t", "UTF-8", source], capture_output=True)
    converted.write_bytes(iconv.stdout)
    assert iconv.returncode == 0 and converted.read_text(encoding="utf-8").startswith('{"mess')


def test_zeros_are_binary_not_utf16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "zeros.bin"
    path.write_bytes(bytes(4096))
    code, err = run_main(["count", str(path)], capsys)
    assert_one_line_error(code, err)
    assert "binary data (NUL byte at offset 0)" in err


@pytest.mark.parametrize("command", ["count", "estimators", "request"])
def test_a_symlink_loop_is_named(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main([command, symlink_loop(tmp_path)], capsys)
    assert_one_line_error(code, err)
    assert "a.txt: a symlink loop; fix the link" in err


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:99999/v1", "Port out of range 0-65535"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://user:hunter2-pass@[::1]:70000/v1", "Port out of range"),
        ("ftp://user:hunter2-pass@example.com/v1?key=hunter2-query", "must be an http(s) URL"),
        ("http://127.0.0.1:port/v1", "Port could not be cast"),
    ],
)
def test_a_bad_base_url_is_one_line_without_its_secrets(
    url: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "a.jsonl"
    args = [
        "chat",
        "--base-url",
        url,
        "--model",
        "m",
        "--window",
        "8192",
        "--archive",
        str(archive),
    ]
    code, err = run_main(args, capsys)
    assert_one_line_error(code, err)
    assert problem in err and "hunter2" not in err
    assert not archive.exists(), "nothing started"
