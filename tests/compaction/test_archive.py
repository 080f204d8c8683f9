"""The session archive: round trip, resume, torn lines, garbage, the lock, fsync, no secrets."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.compaction.fakes import FakeCounter, ScriptedSummarizer, coding_session

from ctxbudget.compaction.archive import MAX_RECORD_BYTES, Archive, load_archive
from ctxbudget.compaction.records import message_from_record, message_to_record
from ctxbudget.compaction.strategies import compact
from ctxbudget.errors import ArchiveError, ConfigError, MessageFormatError, TraceFormatError
from ctxbudget.messages.model import ImagePart, Message, Request, TextPart, ToolCall
from ctxbudget.messages.usage import Usage

USAGE = Usage(
    input_tokens=900,
    cache_read_tokens=512,
    output_tokens=40,
    reasoning_tokens=12,
    compaction_id="c1",
    timestamp=1700000000.5,
)
RICH = (
    Message(
        role="user",
        content=(
            TextPart("look at this 图片"),
            ImagePart(
                url="data:image/png;base64,AAAA",
                width=64,
                height=32,
                detail="low",
                media_type="image/png",
            ),
        ),
    ),
    Message(
        role="assistant",
        content="",
        reasoning="thinking… 思考",
        tool_calls=(ToolCall(id="t1", name="read_file", arguments='{"path": "a.py"}'),),
        usage=USAGE,
        meta={"step": 1},
    ),
    Message(role="tool", content="print('hi')\n", tool_call_id="t1", name="read_file"),
    Message(role="assistant", content="done", name="bot"),
)


def test_round_trip_of_every_message_field(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Archive(path) as archive:
        seqs = [archive.append_message(m) for m in RICH]
        archive.append_usage(USAGE, call_index=0)
        archive.append_meta({"model": "qwen3", "window": 1200})
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    state = load_archive(path)
    assert state.history == RICH == state.view
    assert state.usage == ((0, USAGE),)
    assert state.meta["model"] == "qwen3" and state.meta["format"] == "ctxbudget-archive"
    assert state.warnings == () and state.compaction_id is None
    for line in path.read_text(encoding="utf-8").splitlines():
        json.loads(line)  # one JSON record per line


@given(st.lists(st.text(), max_size=4), st.sampled_from(["user", "assistant", "tool"]))
@settings(max_examples=50, deadline=None)
def test_message_record_round_trip_property(texts: list[str], role: str) -> None:
    m = Message(
        role=role,
        content=tuple(TextPart(t) for t in texts),  # type: ignore[arg-type]
        reasoning=texts[0] if texts else None,
        meta={"k": texts},
    )
    record = json.loads(json.dumps(message_to_record(m)))
    assert message_from_record(record) == Message(
        role=m.role, content=m.content, reasoning=m.reasoning, meta={"k": list(texts)}
    )


@pytest.mark.parametrize(
    "record",
    [
        [],
        {"content": "x"},
        {"role": "robot"},
        {"role": "user", "content": 3},
        {"role": "assistant", "tool_calls": [{"id": 1}]},
        {"role": "user", "usage": {"input_tokens": -1}},
    ],
)
def test_bad_message_records_raise_format_errors(record: object) -> None:
    with pytest.raises(MessageFormatError) as info:
        message_from_record(record)
    assert str(info.value).startswith("message")


def test_compaction_rebuilds_the_view_on_resume(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    session = coding_session(30)
    request = Request(system="sys", messages=session)
    counter = FakeCounter()
    threshold = counter.count(request).floor + 2000
    result = compact(request, counter, threshold=threshold, summarizer=ScriptedSummarizer())
    later = Message(role="user", content="and now?")
    with Archive(path) as archive:
        for m in session:
            archive.append_message(m)
        archive.append_compaction(result, trigger="context_pressure", extra={"turn": 3})
        archive.append_message(later)
    state = load_archive(path)
    assert state.history == (*session, later)
    assert state.view == (*result.messages, later)
    assert state.compaction_id == result.compaction_id and state.compactions == 1
    record = json.loads(path.read_text().splitlines()[-2])
    assert record["type"] == "compaction" and record["trigger"] == "context_pressure"
    refs = [e for e in record["view"] if "ref" in e]
    assert refs  # kept messages are referenced, not copied
    assert len(refs) < len(record["view"])  # the summary and changed outputs are stored whole


def test_reopening_resumes_and_continues_seq(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Archive(path) as archive:
        first = archive.append_message(RICH[0])
    with Archive(path) as archive:
        assert archive.resumed.history == (RICH[0],)
        second = archive.append_message(RICH[3])
    assert second > first
    assert load_archive(path).history == (RICH[0], RICH[3])


def test_torn_last_line_is_reported_skipped_and_file_stays_appendable(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Archive(path) as archive:
        archive.append_message(RICH[0])
        archive.append_message(RICH[1])
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # killed mid-write: the last record is cut short
    state = load_archive(path)
    assert state.history == (RICH[0],)
    assert len(state.warnings) == 1 and "torn" in state.warnings[0]
    size = path.stat().st_size
    with Archive(path) as archive:
        archive.append_message(RICH[3])
    assert path.read_bytes()[:size] == data[:-25]  # nothing truncated or rewritten
    again = load_archive(path)
    assert again.history == (RICH[0], RICH[3])
    assert len(again.warnings) == 1


def test_torn_header_only_is_an_empty_session(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"type":"meta","se')
    assert load_archive(path).history == ()
    with Archive(path) as archive:
        archive.append_message(RICH[0])
    assert load_archive(path).history == (RICH[0],)


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\x01\x02binary\xff\xfe\n",
        b"hello world\nsecond\n",
        b'{"role": "user"}\n',
        b'[1, 2]\n{"a": 1}\n',
    ],
    ids=["binary", "text", "other-jsonl", "json-array"],
)
def test_garbage_is_a_one_line_format_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "g.jsonl"
    path.write_bytes(content)
    for opener in (load_archive, Archive):
        with pytest.raises(TraceFormatError) as info:
            opener(path)
        assert "\n" not in str(info.value) and "not a ctxbudget archive" in str(info.value)


def test_missing_and_directory_paths_are_archive_errors(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="does not exist"):
        load_archive(tmp_path / "nope.jsonl")
    with pytest.raises(ArchiveError, match="is a directory"):
        load_archive(tmp_path)
    with pytest.raises(ArchiveError, match="is a directory"):
        Archive(tmp_path)
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert load_archive(tmp_path / "empty.jsonl").history == ()


def test_every_record_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    with Archive(tmp_path / "s.jsonl") as archive:
        header = len(calls)
        for m in RICH:
            archive.append_message(m)
        archive.append_usage(USAGE, 1)
    assert header == 1 and len(calls) == 1 + len(RICH) + 1


HOLDER = textwrap.dedent(
    """
    import sys
    from ctxbudget.compaction.archive import Archive
    archive = Archive(sys.argv[1])
    print("locked", flush=True)
    sys.stdin.readline()
    archive.close()
    """
)


def test_second_process_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(ArchiveError) as info:
            Archive(path)
        assert str(info.value) == (
            f"archive {path} is in use by another process; stop it or pass another archive path"
        )
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    with Archive(path) as archive:  # free again once the holder closed it
        archive.append_message(RICH[0])


def test_secrets_have_no_place_in_records(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    key = "sk-test-FAKEKEY0123456789"
    with Archive(path) as archive:
        with pytest.raises(ConfigError, match="credentials are never archived"):
            archive.append_meta({"provider": {"api_key": key}})
        with pytest.raises(ConfigError):
            archive.append_message(
                Message(role="user", content="x", meta={"Authorization": f"Bearer {key}"})
            )
    assert key not in path.read_text()


# -- what an archive path may be, and what a file must hold --------------------------------


def demo(archive: Path, *extra: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    """``ctxbudget demo`` on ``archive`` in a child: 512 MB address space, 60 s, and at most
    ``fsize`` bytes per written file (RLIMIT_FSIZE: a disk that fills up)."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (512 * 2**20, 512 * 2**20))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    src = str(Path(__file__).resolve().parents[2] / "src")
    return subprocess.run(
        [sys.executable, "-m", "ctxbudget.cli.main", "demo", "--archive", str(archive),
         "--turns", "2", "--json", *extra],
        capture_output=True, text=True, timeout=60, preexec_fn=limits,
        env={**os.environ, "PYTHONPATH": src},
    )  # fmt: skip


def fifo(tmp: Path) -> Path:
    path = tmp / "pipe"
    os.mkfifo(path)
    return path


def symlink_loop(tmp: Path) -> Path:
    (tmp / "a").symlink_to(tmp / "b")
    (tmp / "b").symlink_to(tmp / "a")
    return tmp / "a"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: Path("/dev/full"), "is a character device; pass a regular file or a new path"),
        (lambda tmp: Path("/dev/zero"), "is a character device"),
        (fifo, "is a named pipe"),
        (symlink_loop, "is a symlink loop; fix the link"),
        (lambda tmp: tmp, "is a directory"),
    ],
    ids=["dev-full", "dev-zero", "fifo", "symlink-loop", "directory"],
)
def test_an_archive_path_that_is_not_a_regular_file_is_one_line(
    tmp_path: Path, make: Callable[[Path], Path], expected: str
) -> None:
    path = make(tmp_path)
    if path.is_dir() or path.is_symlink():  # safe to try in this process
        with pytest.raises(ArchiveError, match=expected):
            Archive(path)
        with pytest.raises(ArchiveError, match=expected):
            load_archive(path)
    if not path.is_dir():  # as a user meets it, in a child bounded in time and memory
        done = demo(path)
        assert done.returncode == 2 and done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"ctxbudget: archive {path} ") and expected in line


@pytest.mark.parametrize(
    "text", ["\nMy notes\n", "\n\n   \n", '   \t\n{"type":"message","seq":0}\n', "notes"]
)
def test_a_file_with_content_but_no_header_is_never_appended_to(tmp_path: Path, text: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceFormatError, match="is not a ctxbudget archive"):
        Archive(path)
    assert path.read_text(encoding="utf-8") == text, "not one byte appended"


def test_a_line_over_the_cap_is_an_error_found_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    Archive(path).close()
    with path.open("ab") as f:
        for _ in range(MAX_RECORD_BYTES // 2**20 + 8):  # 72 MiB without a newline
            f.write(b"x" * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(TraceFormatError, match="line 2 is longer than 64 MiB"):
            load_archive(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_RECORD_BYTES + 16 * 2**20, peak  # the line, and its copy as bytes


def test_a_record_over_the_cap_is_refused_and_the_archive_stays_usable(tmp_path: Path) -> None:
    with Archive(tmp_path / "a.jsonl") as archive:
        with pytest.raises(ArchiveError, match="records are capped at 64 MiB"):
            archive.append_message(Message(role="tool", content="x" * MAX_RECORD_BYTES))
        archive.append_message(Message(role="user", content="still fine"))
    assert [m.text for m in load_archive(tmp_path / "a.jsonl").history] == ["still fine"]


def test_a_full_disk_keeps_the_archive_name_in_the_message(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    done = demo(path, fsize=2000)  # the header fits; a later record does not
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line == f"ctxbudget: cannot append to archive {path}: File too large"


@pytest.mark.parametrize(
    ("key", "value"),
    [("seed", "zzz"), ("window", 10**30), ("window", 0), ("scenario", 5), ("window", True)],
)
def test_a_damaged_stored_setting_is_one_line(tmp_path: Path, key: str, value: object) -> None:
    path = tmp_path / "a.jsonl"
    assert demo(path).returncode == 0
    lines = path.read_text(encoding="utf-8").splitlines()
    (index,) = [i for i, line in enumerate(lines) if '"session"' in line]
    record = json.loads(lines[index])
    record["meta"]["session"][key] = value
    lines[index] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = demo(path, "--turns", "3")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert f"stored setting {key}={value!r}"[:60] in line and "is not valid" in line


def test_a_lone_surrogate_is_archived_and_read_back_as_it_was(tmp_path: Path) -> None:
    """A JSON ``"\\ud800"`` decodes to a lone surrogate, which UTF-8 cannot hold: the record is
    written with JSON's escape instead, and reads back to the very same message."""
    path = tmp_path / "session.jsonl"
    odd = Message(role="user", content="a lone \ud800 surrogate")
    with Archive(path) as archive:
        archive.append_message(odd)
        archive.append_message(RICH[0])
    path.read_bytes().decode("utf-8")  # the file stays UTF-8
    assert load_archive(path).history == (odd, RICH[0])
