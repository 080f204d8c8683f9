"""What following a llama.cpp server's own rendering costs: ``LlamaCppCounter`` (the server's
``/apply-template`` + ``/tokenize`` over loopback) against the local ``hf:`` count of the same
folder, side by side in one run, per request at ~1K and ~8K tokens. Writes bench/server_count.md.

Run (after scripts/build_llama_server.sh, which make test-server runs):
    PYTHONPATH=$PWD/src .venv/bin/python bench/server_count.py
CTXBUDGET_LLAMA_CACHE picks the built server as the server tier does. ``--requests N``: N timed
requests a row (the quick run of ``run_all.py``); ``--out DIR``: the block goes to
DIR/server_count.md.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from blocks import add_out_argument, write_block  # bench/blocks.py, beside this script
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Message, Request, ToolSpec
from ctxbudget.providers.llamacpp_count import LlamaCppCounter

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))  # tests/: the stored folder and the server harness
sys.path.insert(0, str(HERE.parent / "tests" / "server"))
from llama_harness import LlamaServer, build_server, write_gguf  # noqa: E402
from tests.conftest import hf_folder_at  # noqa: E402

FOLDER = "smollm3-template"
WINDOW = 16384  # the tier's 2048 cannot hold an 8K request
PARAGRAPH = (
    "The agent read the file, found the failing assertion in the parser and proposed a fix. "
    "代理读取了文件，找到了解析器中失败的断言。 🙂 "
)  # about 40 tokens
TOOLS = (
    ToolSpec(
        name="read_file",
        description="Read a file of the repository.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    ),
    ToolSpec(
        name="search",
        description="Search the code base; returns matching lines.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["query"],
        },
    ),
)
SIZES = {1_000: 201, 8_000: 61}
"""Target tokens and timed requests at that size (p99 of 61 is the second slowest)."""
_fresh = itertools.count()


def conversation(tokens: int) -> Request:
    """About ``tokens`` tokens in ~500-token user/assistant messages, ending on a user message;
    every call's texts are new, so no cache of an earlier count applies."""
    tag = next(_fresh)
    n = max(1, tokens // 500) | 1  # odd: the last is a user message
    text = PARAGRAPH * 12
    messages = tuple(
        Message(role="user" if i % 2 == 0 else "assistant", content=f"{tag}.{i}: {text}")
        for i in range(n)
    )
    return Request(
        system=f"You are a careful coding agent ({tag}).", tools=TOOLS, messages=messages
    )


def step_pair(tokens: int) -> tuple[Request, Request]:
    """A request and the next one of its loop: an assistant reply and a user message more."""
    base = conversation(tokens)
    reply = Message(role="assistant", content="Done. " + PARAGRAPH * 2)
    ask = Message(role="user", content="Now run the tests. " + PARAGRAPH)
    return base, Request(
        system=base.system, tools=base.tools, messages=(*base.messages, reply, ask)
    )


def percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def timed(
    runs: int, prepare: Callable[[], Request], measure: Callable[[Request], object]
) -> list[float]:
    """Seconds of ``measure(prepare())``, ``runs`` times (``prepare`` not timed)."""
    out = []
    for _ in range(runs):
        given = prepare()
        start = time.perf_counter()
        measure(given)
        out.append(time.perf_counter() - start)
    return out


def measure(where: Path, sizes: dict[int, int]) -> list[str]:
    """The table's rows: a llama-server on a tiny model in ``where``, each counter timed
    ``sizes[tokens]`` times at each size."""
    folder = hf_folder_at(FOLDER, where)
    model = write_gguf(folder, where / "smollm3-tiny.gguf", pre="qwen2", seed=3)
    rows = []
    with LlamaServer(build_server(), model, ctx=WINDOW, log=where / "server.log") as server:
        remote = LlamaCppCounter(server.base_url)
        two_routes = LlamaCppCounter(server.base_url, one_call=False)
        local = RequestCounter(f"hf:{folder}")
        local.count(conversation(1_000))  # load the tokenizer and compile the template
        remote.count_tokens(conversation(1_000))  # open the connections
        two_routes.count_tokens(conversation(1_000))
        for tokens, runs in sizes.items():
            sample = conversation(tokens)
            size = local.count(sample).total
            served = remote.count_tokens(sample)

            def fresh(tokens: int = tokens) -> Request:
                return conversation(tokens)

            def loop_step(
                counter: RequestCounter | LlamaCppCounter, tokens: int = tokens
            ) -> Request:
                base, after = step_pair(tokens)
                counter.count(base)  # the loop counted the request before: not timed
                return after

            cases: list[tuple[str, Callable[[], Request], Callable[[Request], object]]] = [
                ("hf: count, new request", fresh, local.count),
                ("server: count_tokens, 1 call (input_tokens)", fresh, remote.count_tokens),
                (
                    "server: count_tokens, 2 calls (apply-template + tokenize)",
                    fresh,
                    two_routes.count_tokens,
                ),
                ("server: count() with breakdown, new request", fresh, remote.count),
                ("hf: loop step (+2 messages)", lambda: loop_step(local), local.count),
                (
                    "server: count() loop step (+2 messages)",
                    lambda: loop_step(remote),
                    remote.count,
                ),
            ]
            for name, prepare, measure in cases:
                p50, p99 = percentiles(timed(runs, prepare, measure))
                rows.append(
                    f"| {size:,} (server {served:,}) | {name} | {runs} | "
                    f"{p50 * 1e3:.2f} | {p99 * 1e3:.2f} |"
                )
                print(rows[-1], flush=True)
        remote.close()
        two_routes.close()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Time every counter at each size and write the block of bench/server_count.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, help="timed requests a row (default: SIZES)")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    sizes = {tokens: args.requests or runs for tokens, runs in SIZES.items()}
    with tempfile.TemporaryDirectory(prefix="ctxbudget-bench-") as tmp:  # the model: 45 MB
        rows = measure(Path(tmp), sizes)
    table = [
        "| tokens (hf:, server) | counter | requests | p50 ms | p99 ms |",
        "|---:|---|---:|---:|---:|",
        *rows,
    ]
    write_block(args.out / "server_count.md", "server_count.py", "\n".join(table))


if __name__ == "__main__":
    main()
