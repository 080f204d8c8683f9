"""A recognisable fake key goes to the server and nowhere else: not stdout, stderr, logs,
tracebacks, the archive, the ``--json`` output or the HTML page made from the archive."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers import bodies
from tests.providers.fakeserver import FakeServer, Reply

from .chatrun import Run, run_cli

SECRET = "sk-test-SECRET-1234567890"
CUSTOM_ENV = "CTXBUDGET_SECURITY_TEST_KEY"
# What must never be shown: the key, any piece of it long enough to matter, and our header.
FORBIDDEN = re.compile(r"SECRET-1234567890|1234567890|bearer |authorization", re.IGNORECASE)
ECHO_401 = {
    "error": {
        "message": f"Incorrect API key provided: {SECRET}. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
# An overflow whose text quotes the key (a gateway that echoes the request's headers).
OVERFLOW_WITH_KEY = {
    "object": "error",
    "message": f"api_key={SECRET}: " + bodies.VLLM_OVERFLOW["message"].replace("4096", "6000"),
    "type": "BadRequestError",
    "code": 400,
}
SCENARIOS: dict[str, tuple[list[Reply], str, int]] = {
    # name: (server script, stdin, expected exit code)
    "normal": ([Reply(body=bodies.OPENAI_CHAT)] * 2, "hello\nagain\n", 0),
    "429 then success": (
        [
            Reply(status=429, body=bodies.OPENAI_RATE_LIMIT, headers={"Retry-After": "0"}),
            Reply(body=bodies.OPENAI_CHAT),
        ],
        "hello\n",
        0,
    ),
    "401": ([Reply(status=401, body=ECHO_401)], "hello\n", 2),
    "overflow, compact, retry": (
        [
            Reply(body=bodies.OPENAI_CHAT),
            Reply(body=bodies.OPENAI_CHAT),
            Reply(status=400, body=OVERFLOW_WITH_KEY),
            Reply(body=bodies.OPENAI_CHAT),
        ],
        "first\nsecond\nthird\n",
        0,
    ),
}
MODES = {
    "json": ["--json"],
    "json debug verbose": ["--json", "--verbose"],
    "json stream": ["--json", "--stream"],
    "terminal verbose stream": ["--verbose", "--stream"],
}


@pytest.fixture
def everything_logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record any library logs at DEBUG, before any redacting filter of ours."""
    caplog.set_level(logging.DEBUG)
    yield caplog


def streamed(script: list[Reply]) -> list[Reply]:
    """The same script with each reply streamed (errors stay plain HTTP errors)."""
    return [
        Reply(chunks=bodies.OPENAI_STREAM) if r.body is bodies.OPENAI_CHAT else r for r in script
    ]


def chat(
    server: FakeServer,
    archive: Path,
    mode: list[str],
    stdin: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *,
    debug: bool = False,
    key_env: str | None = None,
) -> Run:
    args = [*(["--debug"] if debug else []), "chat", "--base-url", server.base_url]
    args += ["--model", "m", "--window", "8192", "--max-output", "256", "--archive", str(archive)]
    args += [*mode, *(["--api-key-env", key_env] if key_env else [])]
    return run_cli(args, capsys, monkeypatch, stdin)


def html_of(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch
) -> tuple[Run, str]:
    page = tmp_path / "page.html"
    run = run_cli(["replay", str(archive), "--window", "8192", "--html", str(page), "--json"],
                  capsys, mp)  # fmt: skip
    assert run.code == 0, run.stderr
    return run, page.read_text(encoding="utf-8")


def assert_clean(name: str, text: str) -> None:
    found = FORBIDDEN.search(text)
    assert found is None, f"{name} shows {found.group()!r}: ...{text[found.start() - 80 :][:200]}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_key_reaches_the_server_and_no_output(
    scenario: str,
    mode: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    everything_logged: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    script, stdin, code = SCENARIOS[scenario]
    archive = tmp_path / "session.jsonl"
    debug = "debug" in mode
    if "--stream" in MODES[mode]:
        script = streamed(script)
    with FakeServer(*script) as server:
        run = chat(server, archive, MODES[mode], stdin, capsys, monkeypatch, debug=debug)
    assert run.code == code, run.everything
    assert len(server.requests) == len(script), "every scripted reply was asked for"
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in server.requests)
    outputs = {
        "stdout": run.stdout,
        "stderr": run.stderr,
        "traceback": run.traceback,
        "logs": everything_logged.text,
        "archive": archive.read_text(encoding="utf-8") if archive.exists() else "",
    }
    if code == 0:
        replay, page = html_of(archive, tmp_path, capsys, monkeypatch)
        outputs |= {"replay --json": replay.stdout, "html page": page}
    for name, text in outputs.items():
        assert_clean(name, text)
    if "verbose" in mode:
        assert "DEBUG ctxbudget.providers" in run.stderr, "--verbose logs at DEBUG on stderr"
    if mode == "terminal verbose stream" and code == 0:
        assert run.stdout.count("model> Hello! How can I assist you today?\n") == stdin.count("\n")
    if "json" in mode and code == 0:
        assert json.loads(run.stdout)["archive"] == str(archive)


def test_the_echoed_key_is_redacted_where_it_is_shown(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    everything_logged: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with FakeServer(Reply(status=401, body=ECHO_401)) as server:
        run = chat(server, tmp_path / "a.jsonl", ["--json"], "hi\n", capsys, monkeypatch)
    assert run.code == 2 and run.stdout == ""
    (line,) = run.stderr.strip().splitlines()
    assert "HTTP 401: Incorrect API key provided: [redacted]. You can find" in line
    assert "check the key in $OPENAI_API_KEY" in line
    assert SECRET not in line + everything_logged.text


def test_an_overflow_quoting_the_key_is_archived_redacted(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    script, stdin, _ = SCENARIOS["overflow, compact, retry"]
    archive = tmp_path / "a.jsonl"
    with FakeServer(*script) as server:
        run = chat(server, archive, ["--json"], stdin, capsys, monkeypatch)
    summary = json.loads(run.stdout)
    assert summary["overflows"] == 1 and summary["window"] == 6000
    text = archive.read_text(encoding="utf-8")
    assert "api_key=[redacted]" in text, "the overflow event is archived, without the key"
    assert SECRET not in text


def test_a_custom_key_variable(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    everything_logged: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv(CUSTOM_ENV, SECRET)
    archive = tmp_path / "a.jsonl"
    script = [Reply(body=bodies.OPENAI_CHAT), Reply(status=401, body=ECHO_401)]
    with FakeServer(*script) as server:
        run = chat(server, archive, ["--json", "--verbose"], "hi\nagain\n", capsys, monkeypatch,
                   debug=True, key_env=CUSTOM_ENV)  # fmt: skip
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {SECRET}"] * 2
    assert run.code == 2 and "ProviderError" in run.traceback
    assert f"check the key in ${CUSTOM_ENV}" in run.traceback
    for name, text in {
        "output": run.everything,
        "logs": everything_logged.text,
        "archive": archive.read_text(encoding="utf-8"),
    }.items():
        assert_clean(name, text)


CUSTOM_SECRET = "corp-token-ZQ7Y9X1W5V3U"  # not an sk- key: only the variable says it is one


def echoing(key: str, stream: bool) -> Reply:
    """A successful reply that quotes the key, in content split mid-key when streamed."""
    text = f"Sure. Your key is {key} and the header was 'Authorization: Bearer {key}'."
    if not stream:
        choice = {**bodies.OPENAI_CHAT["choices"][0]}
        choice["message"] = {**choice["message"], "content": text}
        return Reply(body={**bodies.OPENAI_CHAT, "choices": [choice]})
    first, last = bodies.OPENAI_STREAM[0], bodies.OPENAI_STREAM[-2:]
    pieces = [text[i : i + 7] for i in range(0, len(text), 7)]  # every key crosses a cut
    chunks = [
        {**first, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
        for p in pieces
    ]
    return Reply(chunks=(first, *chunks, *last))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("key_env", [None, CUSTOM_ENV], ids=["sk-key", "custom-env-key"])
@pytest.mark.parametrize("as_json", [False, True], ids=["terminal", "json"])
def test_a_key_echoed_in_a_successful_reply_is_redacted(
    stream: bool,
    key_env: str | None,
    as_json: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = SECRET if key_env is None else CUSTOM_SECRET
    monkeypatch.setenv(key_env or "OPENAI_API_KEY", key)
    archive = tmp_path / "a.jsonl"
    mode = [*(["--json"] if as_json else []), *(["--stream"] if stream else [])]
    with FakeServer(echoing(key, stream)) as server:
        run = chat(server, archive, mode, "hi\n", capsys, monkeypatch, key_env=key_env)
    assert run.code == 0, run.everything
    stored = archive.read_text(encoding="utf-8")
    assert "Your key is [redacted] and" in stored or "Your key is sk-[redacted] and" in stored
    if not as_json:
        shown = " ".join(run.stdout.split())
        assert "Your key is" in shown and "Bearer [redacted]" in shown, shown
    for name, text in {"stdout": run.stdout, "stderr": run.stderr, "archive": stored}.items():
        assert key not in text, name
        assert key[-8:] not in text, f"{name} shows the end of the key"
