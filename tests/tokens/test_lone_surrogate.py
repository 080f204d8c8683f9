"""A lone surrogate in a message (JSON ``"\\ud800"`` decodes to one) is counted as tiktoken
counts it, as U+FFFD, by every exact tokenizer: Hugging Face ``tokenizers`` refuses such a str
with a TypeError, which used to escape as an internal error or a "chat template failed"."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxbudget.cli.main import main
from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.registry import get_tokenizer, valid_unicode

LONE = "a lone \ud800 surrogate, then a pair written apart \ud83d\ude00 and \udfff"
VALID = "a lone \ufffd surrogate, then a pair written apart \U0001f600 and \ufffd"
"""``LONE`` as tiktoken repairs it: UTF-16 with surrogatepass, decoded with replace."""

FOLDERS = ("qwen2.5", "llama3-cl100k", "smollm3-template", "hermes-2-pro-template")


def test_the_repair_is_tiktokens() -> None:
    assert valid_unicode(LONE) == VALID
    assert valid_unicode(VALID) == VALID


@pytest.mark.parametrize("name", ["qwen3", "qwen2.5", "qwen3.6", "cl100k_base", "o200k_base"])
def test_a_builtin_tokenizer_counts_a_lone_surrogate_as_u_fffd(name: str) -> None:
    tokenizer = get_tokenizer(name)
    for special in (True, False):
        assert tokenizer.encode(LONE, special=special) == tokenizer.encode(VALID, special=special)


@pytest.mark.parametrize("folder", FOLDERS)
def test_an_hf_folder_counts_a_lone_surrogate_as_u_fffd(
    hf_folder: Callable[[str], Path], folder: str
) -> None:
    name = f"hf:{hf_folder(folder)}"
    tokenizer = get_tokenizer(name)
    for special in (True, False):
        assert tokenizer.encode(LONE, special=special) == tokenizer.encode(VALID, special=special)
    # The batch path (new template pieces) too, beside a text that needs no repair.
    assert tokenizer.count_special_many([LONE, "plain", LONE]) == [
        len(tokenizer.encode(VALID, special=True)),
        len(tokenizer.encode("plain", special=True)),
        len(tokenizer.encode(VALID, special=True)),
    ]
    assert tokenizer.count_special(LONE) == len(tokenizer.encode(VALID, special=True))  # a step's

    def request(text: str) -> Request:
        return Request(
            system=text,
            messages=(
                Message(role="user", content=text),
                Message(role="assistant", content="Fine."),
                Message(role="user", content=f"again: {text}"),
            ),
        )

    expected = count_request(request(VALID), name)
    assert count_request(request(LONE), name) == expected
    counter = RequestCounter(name)  # a step with the surrogate in its new message
    counter.count(request(LONE).with_messages(request(LONE).messages[:2]))
    assert counter.count(request(LONE)) == expected


@pytest.mark.parametrize("folder", ["qwen2.5", "llama3-cl100k"])
def test_the_request_command_counts_a_lone_surrogate(
    hf_folder: Callable[[str], Path],
    folder: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Once an internal error (exit 1) for hf:qwen2.5, a template failure for Llama 3."""
    name = f"hf:{hf_folder(folder)}"
    lone, valid = tmp_path / "lone.json", tmp_path / "valid.json"
    # json.dumps writes the surrogate as the escape "\ud800", as a client would send it.
    lone.write_text(json.dumps({"messages": [{"role": "user", "content": LONE}]}), "utf-8")
    valid.write_text(json.dumps({"messages": [{"role": "user", "content": VALID}]}), "utf-8")
    totals = []
    for path in (lone, valid):
        code = 0
        try:
            main(["request", str(path), "--tokenizer", name, "--json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        assert code == 0, err
        totals.append(json.loads(out)["tokens"])
    assert totals[0] == totals[1]
