"""URL, key and redaction helpers of the providers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxbudget.errors import ConfigError
from ctxbudget.providers.endpoint import (
    NO_API_KEY,
    StreamRedactor,
    api_key_from_env,
    checked_url,
    is_local_url,
    public_url,
    redact,
    url_secrets,
)


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:11434/v1", True),
        ("http://127.0.0.1:8000/v1", True),
        ("http://[::1]:8080/v1", True),
        ("http://192.168.1.20:8000/v1", True),
        ("http://10.0.0.5/v1", True),
        ("http://gpu.local:8000/v1", True),
        ("http://0.0.0.0:8000/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://8.8.8.8/v1", False),
    ],
)
def test_is_local_url(url: str, local: bool) -> None:
    assert is_local_url(url) is local


def test_api_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", "  sk-abc  ")
    monkeypatch.setenv("EMPTY", "")
    assert api_key_from_env("K", "https://api.openai.com/v1") == "sk-abc"
    assert api_key_from_env(None, "https://api.openai.com/v1") == NO_API_KEY
    assert api_key_from_env("EMPTY", "http://localhost:11434/v1") == NO_API_KEY
    with pytest.raises(ConfigError, match="set the environment variable EMPTY"):
        api_key_from_env("EMPTY", "https://api.openai.com/v1")


def test_public_url_drops_credentials_and_query() -> None:
    url = "https://bob:pw123@host.example:8443/v1?key=abc#frag"
    assert public_url(url) == "https://host.example:8443/v1"
    assert set(url_secrets(url)) == {"pw123", "key=abc"}


@pytest.mark.parametrize("url", ["", "localhost:8000", "ftp://x/v1", "http://", 42])
def test_checked_url_rejects_non_http(url: object) -> None:
    with pytest.raises(ConfigError, match="http"):
        checked_url(url)


def test_checked_url_strips_the_trailing_slash() -> None:
    assert checked_url("http://localhost:8000/v1/") == "http://localhost:8000/v1"


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        ("key zzz-123 here", ("zzz-123",), "key [redacted] here"),
        ("Authorization: Bearer abc.def", (), "Authorization: Bearer [redacted]"),
        (
            "Incorrect API key provided: sk-proj-AbC123xyz.",
            (),
            "Incorrect API key provided: sk-[redacted].",
        ),
        ("nothing secret", ("",), "nothing secret"),
    ],
)
def test_redact(text: str, secrets: tuple[str, ...], expected: str) -> None:
    assert redact(text, secrets) == expected


CUSTOM = "corp-ZQ7Y9X1W5V3U"
WORDS = st.sampled_from(
    ["key", " ", "\n", "sk-", "sk-test-SECRET-1234567890", "Bearer ", "bearer", CUSTOM, "s", "k",
     "-", "corp-", "x1", "是", "b", "e", "sk-abcdefghij", "Authorization: Bearer tok123"]
)  # fmt: skip


@given(st.lists(WORDS, max_size=30), st.lists(st.integers(0, 400), max_size=8))
def test_streamed_redaction_never_shows_more_than_redacting_the_whole(
    words: list[str], cuts: list[int]
) -> None:
    """However a reply is cut into deltas, no key shows that ``redact`` of the whole hides; in
    one piece the result is exactly ``redact``'s."""
    text = "".join(words)
    bounds = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)]
    redactor = StreamRedactor((CUSTOM,))
    shown = "".join(redactor.feed(piece) for piece in pieces) + redactor.flush()
    whole = redact(text, (CUSTOM,))
    for secret in ("SECRET-1234567890", CUSTOM, "abcdefghij", "tok123"):
        assert shown.count(secret) <= whole.count(secret), (pieces, shown)
    one = StreamRedactor((CUSTOM,))
    assert one.feed(text) + one.flush() == whole
