"""One ``hf:`` tokenizer is shared by every thread that counts with it (the gateway counts from
several threads): it holds no per-call state, so each thread's count is the one it gets alone."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import tokenizers

from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens import registry
from ctxbudget.tokens.registry import ExactTokenizer, get_tokenizer

# Texts where parsing special tokens matters: ``<|im_start|>`` is one token when parsed and
# several as plain text (Qwen 2.5 keeps ``split_special_tokens`` off).
TEXTS = [
    "<|im_start|>user\nhello there<|im_end|>\n",
    "plain words, nothing special " * 20,
    "<|endoftext|><|im_start|>assistant\n" + "x = 1\n" * 30 + "<|im_end|>",
    "a <|im_start|> inside <|im_end|> a sentence, twice: <|im_start|><|im_start|>",
]
THREADS = 8
ROUNDS = 150


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows, so a race shows in few rounds."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def run_threads(work: list[Callable[[], None]]) -> list[BaseException]:
    """Run each of ``work`` in its own thread, all started together; the errors they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(work))

    def body(job: Callable[[], None]) -> None:
        start.wait()
        try:
            job()
        except BaseException as exc:  # an assertion or a tokenizer's "Already borrowed"
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a counting thread hung"
    return errors


def test_threads_sharing_one_tokenizer_each_get_their_single_threaded_answer(
    hf_folder: Callable[[str], Path], fast_switching: None
) -> None:
    tokenizer = get_tokenizer(f"hf:{hf_folder('qwen2.5')}")
    ordinary = [tokenizer.encode(t, special=False) for t in TEXTS]
    special = [tokenizer.count_special(t) for t in TEXTS]
    assert [len(ids) for ids in ordinary] != special  # the texts are ones where the mode matters

    def plain_text() -> None:
        for _ in range(ROUNDS):
            assert [tokenizer.encode(t, special=False) for t in TEXTS] == ordinary

    def one_by_one() -> None:
        for _ in range(ROUNDS):
            assert [tokenizer.count_special(t) for t in TEXTS] == special

    def in_batches() -> None:  # encode_batch lets go of the GIL while it runs
        for _ in range(ROUNDS):
            assert tokenizer.count_special_many(TEXTS) == special

    work = [plain_text, one_by_one, plain_text, in_batches] * (THREADS // 4)
    errors = run_threads(work)
    assert not errors, f"{len(errors)} of {THREADS} threads went wrong, first: {errors[0]!r}"


class RecordingTokenizer:
    """A ``tokenizers.Tokenizer`` that records each attribute set on it after it has encoded:
    state one call leaves for the next, which another thread would see mid-call."""

    late_writes: ClassVar[list[str]] = []

    def __init__(self, real: Any) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_used", False)

    @classmethod
    def from_file(cls, path: str) -> RecordingTokenizer:
        return cls(REAL_TOKENIZER.from_file(path))

    @classmethod
    def from_str(cls, text: str) -> RecordingTokenizer:
        return cls(REAL_TOKENIZER.from_str(text))

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        object.__setattr__(self, "_used", True)
        return self._real.encode(*args, **kwargs)

    def encode_batch(self, *args: Any, **kwargs: Any) -> Any:
        object.__setattr__(self, "_used", True)
        return self._real.encode_batch(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._used:
            self.late_writes.append(name)
        setattr(self._real, name, value)


REAL_TOKENIZER = tokenizers.Tokenizer


def test_an_hf_tokenizer_is_never_changed_once_it_has_encoded(
    hf_folder: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deterministic where the race above depends on timing: any write after a call is one.
    monkeypatch.setattr(tokenizers, "Tokenizer", RecordingTokenizer)
    monkeypatch.setattr(RecordingTokenizer, "late_writes", [])
    built: ExactTokenizer = registry._build_hf(str(hf_folder("qwen2.5")))
    for text in TEXTS:
        built.encode(text, special=False)
        built.encode(text, special=True)
        built.count_special(text)
    built.count_special_many(TEXTS)
    built.encode(TEXTS[0], special=False)
    assert RecordingTokenizer.late_writes == []


# Messages of a few KB: the tokenizer's batch call (run without the GIL) takes a while.
REQUESTS = [
    Request(
        system="Be brief.",
        messages=tuple(
            Message(role="user" if i % 2 == 0 else "assistant", content=TEXTS[(i + k) % 4] * 20)
            for i in range(k + 1)
        ),
    )
    for k in range(6)
]


def test_request_counters_in_several_threads_count_as_one_thread_does(
    hf_folder: Callable[[str], Path], fast_switching: None
) -> None:
    # A RequestCounter follows one conversation (it keeps what it counted last), so each thread
    # has its own; they share the one tokenizer (and template) ``hf:`` loads once, which other
    # threads meanwhile use for plain text (extractive compaction encodes that way). A folder
    # with a Jinja template: its counts tokenise new pieces in batches.
    name = f"hf:{hf_folder('llama3-cl100k')}"
    tokenizer = get_tokenizer(name)
    expected = [RequestCounter(name).count(request).total for request in REQUESTS]
    texts = [*TEXTS, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"]
    ordinary = [tokenizer.encode(t, special=False) for t in texts]
    assert len(ordinary[-1]) != tokenizer.count_special(texts[-1])
    assert len(set(expected)) == len(expected)
    results: dict[int, list[int]] = {}

    def conversation(index: int) -> Callable[[], None]:
        def count() -> None:
            for _ in range(ROUNDS // 10):
                counter = RequestCounter(name)
                results[index] = [counter.count(request).total for request in REQUESTS]
                assert results[index] == expected

        return count

    def plain_text() -> None:
        for _ in range(ROUNDS):
            assert [tokenizer.encode(t, special=False) for t in texts] == ordinary

    errors = run_threads([conversation(i) for i in range(THREADS // 2)] + [plain_text] * 4)
    assert not errors, f"{len(errors)} of {THREADS} threads went wrong, first: {errors[0]!r}"
    assert results == {i: expected for i in range(THREADS // 2)}


def test_a_folder_that_splits_special_tokens_reads_them_as_text_either_way(
    hf_folder: Callable[[str], Path], tmp_path: Path
) -> None:
    # split_special_tokens on: the folder's own tokenizer serves plain text too (no twin).
    folder = tmp_path / "split"
    shutil.copytree(hf_folder("qwen2.5"), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(config | {"split_special_tokens": True}), encoding="utf-8"
    )
    split = registry._build_hf(str(folder))
    usual = get_tokenizer(f"hf:{hf_folder('qwen2.5')}")
    for text in TEXTS:
        plain = usual.encode(text, special=False)
        assert split.encode(text, special=True) == split.encode(text, special=False) == plain
        assert split.count_special(text) == len(plain)
    assert [split.count_special(t) for t in TEXTS] != [usual.count_special(t) for t in TEXTS]
