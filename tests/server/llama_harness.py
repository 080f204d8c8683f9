"""A real llama.cpp server for the server tier: the built binary, a tiny random-weight GGUF
around a tokenizer folder, and a process on 127.0.0.1 stopped by its PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import gguf
import numpy as np

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build_llama_server.sh"
SERVER_CTX = 2048
"""The test server's real window (``-c``): small, so overflows take a few turns of text."""
START_TIMEOUT = 120.0
"""Seconds for the server to load a model and answer /health (a loaded CI runner is slow)."""

# 1 layer, 64 dimensions: prompt templating, tokenisation, usage and the context check do not
# depend on the weights, and a forward pass over a few thousand tokens takes milliseconds.
EMBED = 64
HEADS = 4
FEED_FORWARD = 128


def build_server() -> Path:
    """The ``llama-server`` binary: built once per pin by the build script, then reused."""
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, f"building llama-server failed:\n{done.stderr[-4000:]}"
    binary = Path(done.stdout.strip().splitlines()[-1])
    assert binary.is_file(), f"the build script printed no binary: {done.stdout!r}"
    return binary


def _token_types(tokenizer: dict[str, object]) -> tuple[list[str], list[int]]:
    """Tokens by id and their GGUF types, as llama.cpp's own converter assigns them: added
    special tokens are control tokens, other added tokens user-defined, holes unused."""
    model = tokenizer["model"]
    assert isinstance(model, dict)
    vocab: dict[str, int] = model["vocab"]
    added = {t["id"]: t for t in tokenizer["added_tokens"]}  # type: ignore[attr-defined]
    by_id = {i: text for text, i in vocab.items()}
    size = max(max(by_id), max(added, default=0)) + 1
    tokens: list[str] = []
    types: list[int] = []
    for i in range(size):
        if i in added:
            tokens.append(added[i]["content"])
            special = added[i]["special"]
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    return tokens, types


def _token_id(tokens: list[str], config: dict[str, object], key: str) -> int | None:
    value = config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return tokens.index(value) if isinstance(value, str) and value in tokens else None


def write_gguf(folder: Path, out: Path, *, pre: str, seed: int = 0) -> Path:
    """A random-weight llama-architecture GGUF with ``folder``'s tokenizer and chat template."""
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    template_file = folder / "chat_template.jinja"
    template = (
        template_file.read_text(encoding="utf-8")
        if template_file.is_file()
        else config["chat_template"]
    )
    tokens, types = _token_types(tokenizer)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(f"ctxbudget-test-{folder.name}")
    writer.add_context_length(32768)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(1)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (("eos_token", writer.add_eos_token_id), ("bos_token", writer.add_bos_token_id),
                     ("pad_token", writer.add_pad_token_id)):  # fmt: skip
        found = _token_id(tokens, config, key)
        if found is not None:
            add(found)
    writer.add_add_bos_token(bool(config.get("add_bos_token", False)))
    writer.add_chat_template(template)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(len(tokens), EMBED).astype(np.float16))
    writer.add_tensor("output_norm.weight", np.ones(EMBED, dtype=np.float32))
    layer = {
        "attn_norm": np.ones(EMBED, dtype=np.float32),
        "attn_q": weight(EMBED, EMBED),
        "attn_k": weight(EMBED, EMBED),
        "attn_v": weight(EMBED, EMBED),
        "attn_output": weight(EMBED, EMBED),
        "ffn_norm": np.ones(EMBED, dtype=np.float32),
        "ffn_gate": weight(FEED_FORWARD, EMBED),
        "ffn_up": weight(FEED_FORWARD, EMBED),
        "ffn_down": weight(EMBED, FEED_FORWARD),
    }
    for name, value in layer.items():
        writer.add_tensor(f"blk.0.{name}.weight", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class LlamaServer:
    """``llama-server`` on 127.0.0.1 with a ``ctx``-token window; stopped by its PID on exit."""

    def __init__(
        self, binary: Path, model: Path, *, ctx: int, log: Path, extra: Sequence[str] = ()
    ) -> None:
        self.binary = binary
        self.model = model
        self.ctx = ctx
        self.log = log
        self.extra = tuple(extra)
        """More ``llama-server`` flags (``-n 8``: the server caps every reply's length)."""
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        command = [
            str(self.binary), "-m", str(self.model), "-c", str(self.ctx),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--jinja",  # render the GGUF's own chat template (tools included), as users run it
            "-np", "1",  # one slot: the whole -c is the request's window
            "-t", "2", "--seed", "7",
            "--ignore-eos",  # random weights would end replies at random; cuts must be by length
            *self.extra,
        ]  # fmt: skip
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"llama-server exited:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.stop()
        raise AssertionError(f"llama-server not healthy in {START_TIMEOUT:g} s:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
