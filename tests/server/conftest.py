"""The server tier's fixtures: the built llama-server, tiny GGUFs (Qwen2.5, Llama-3-style), and
one running server per tokenizer family.

Run by ``make test-server`` (``-m server``); ``make test`` deselects these tests.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama3_folder import write_llama3_folder
from llama_harness import SERVER_CTX, LlamaServer, build_server, write_gguf


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
    where = tmp_path_factory.mktemp("llama")
    model = write_gguf(qwen_folder, where / "qwen2.5-tiny.gguf", pre="qwen2", seed=1)
    with LlamaServer(llama_server_binary, model, ctx=SERVER_CTX, log=where / "server.log") as s:
        yield s


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
    where = tmp_path_factory.mktemp("llama")
    model = write_gguf(llama3_folder, where / "llama3-tiny.gguf", pre="llama-bpe", seed=2)
    with LlamaServer(llama_server_binary, model, ctx=SERVER_CTX, log=where / "server.log") as s:
        yield s


@pytest.fixture(scope="session")
def smollm3_folder(hf_folder: Callable[[str], Path]) -> Path:
    return hf_folder("smollm3-template")


@pytest.fixture(scope="session")
def smollm3_server(
    llama_server_binary: Path, smollm3_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """llama-server on a random-weight GGUF around the SmolLM3 template (Qwen2.5 tokenizer)."""
    where = tmp_path_factory.mktemp("llama")
    model = write_gguf(smollm3_folder, where / "smollm3-tiny.gguf", pre="qwen2", seed=3)
    with LlamaServer(llama_server_binary, model, ctx=SERVER_CTX, log=where / "server.log") as s:
        yield s
