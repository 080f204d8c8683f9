"""The server tier's fixtures: the built llama-server, tiny GGUFs (Qwen2.5, Llama-3-style), and
one running server per tokenizer family.

Run by ``make test-server`` (``-m server``); ``make test`` deselects these tests.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama3_folder import write_llama3_folder
from llama_harness import SERVER_CTX, LlamaServer, build_server, write_gguf


def _serve(
    binary: Path,
    folder: Path,
    name: str,
    pre: str,
    seed: int,
    factory: pytest.TempPathFactory,
    extra: Sequence[str] = (),
) -> Iterator[LlamaServer]:
    """llama-server on a random-weight GGUF written from ``folder`` (``pre``: llama.cpp's name
    for its pre-tokenizer), for the length of a session fixture; ``extra``: more flags."""
    where = factory.mktemp("llama")
    model = write_gguf(folder, where / f"{name}-tiny.gguf", pre=pre, seed=seed)
    log = where / "server.log"
    with LlamaServer(binary, model, ctx=SERVER_CTX, log=log, extra=extra) as server:
        yield server


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    return build_server()


@pytest.fixture(scope="session")
def qwen_folder(hf_folder: Callable[[str], Path]) -> Path:
    return hf_folder("qwen2.5")


@pytest.fixture(scope="session")
def qwen_server(
    llama_server_binary: Path, qwen_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """llama-server on a random-weight GGUF around Qwen2.5's tokenizer and template."""
    yield from _serve(llama_server_binary, qwen_folder, "qwen2.5", "qwen2", 1, tmp_path_factory)


@pytest.fixture(scope="session")
def qwen_generating_server(
    llama_server_binary: Path, qwen_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """`qwen_server`'s model on one thread: for tests whose replies and summaries are generated
    (the gateway's). On a loaded 2-core machine one thread generates ~10x faster than two
    (measured: 2-4 ms a token against 22-25 ms), which wait on each other every token."""
    yield from _serve(
        llama_server_binary, qwen_folder, "qwen2.5", "qwen2", 1, tmp_path_factory,
        extra=("-t", "1", "-tb", "1"),  # later flags win over the harness's own -t 2
    )  # fmt: skip


@pytest.fixture(scope="session")
def llama3_folder(
    hf_folder: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return write_llama3_folder(hf_folder("llama3-cl100k"), tmp_path_factory.mktemp("hf") / "llama3")


@pytest.fixture(scope="session")
def llama3_server(
    llama_server_binary: Path, llama3_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """llama-server on a random-weight GGUF around the Llama-3-style cl100k folder."""
    yield from _serve(
        llama_server_binary, llama3_folder, "llama3", "llama-bpe", 2, tmp_path_factory
    )


@pytest.fixture(scope="session")
def smollm3_folder(hf_folder: Callable[[str], Path]) -> Path:
    return hf_folder("smollm3-template")


@pytest.fixture(scope="session")
def smollm3_server(
    llama_server_binary: Path, smollm3_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """llama-server on a random-weight GGUF around the SmolLM3 template (Qwen2.5 tokenizer)."""
    yield from _serve(llama_server_binary, smollm3_folder, "smollm3", "qwen2", 3, tmp_path_factory)
