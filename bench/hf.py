"""hf: model folders: full count vs transformers, and the incremental step vs tokenising the
new message alone (qwen3 built-in and the Qwen2.5 hf: folder). Writes bench/hf.md.

Run: PYTHONPATH=src .venv/bin/python bench/hf.py   (needs the dev extra: transformers)
"""

from __future__ import annotations

import gzip
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.template_input import template_messages
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.registry import get_tokenizer

HERE = Path(__file__).parent
DATA = HERE.parent / "tests" / "data" / "hf"
TEXT = (
    "The agent read the file, found the failing assertion in the parser and proposed a fix. "
    "代理读取了文件，找到了解析器中失败的断言。 🙂 "
)
NEW = "Please also run the tests again and report which ones still fail. " * 8


def folder(name: str, into: Path) -> Path:
    target = into / name
    target.mkdir(parents=True, exist_ok=True)
    for item in (DATA / name).iterdir():
        if item.name.endswith(".gz"):
            with gzip.open(item, "rb") as packed:
                (target / item.name[:-3]).write_bytes(packed.read())
        else:
            shutil.copyfile(item, target / item.name)
    return target


def conversation(tokens: int, per_message: int = 500) -> Request:
    text = TEXT * max(1, per_message // 40)
    n = max(2, tokens // per_message)
    msgs = tuple(
        Message(role="user" if i % 2 == 0 else "assistant", content=f"{i}: {text}")
        for i in range(n)
    )
    return Request(system="You are a careful coding agent.", messages=msgs)


def median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step(counter: str, base: Request, repeat: int) -> float:
    """Median seconds to count ``base`` + one new message, ``base`` already counted."""
    times = []
    for i in range(repeat):
        rc = RequestCounter(counter)
        rc.count(base)
        new = base.with_messages((*base.messages, Message(role="user", content=f"{i} {NEW}")))
        start = time.perf_counter()
        rc.count(new)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    from transformers import AutoTokenizer

    lines = ["# hf: model folders vs transformers", ""]
    lines += [
        "Command: `PYTHONPATH=src .venv/bin/python bench/hf.py` (transformers 4.57, one run)."
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = folder("qwen2.5", Path(tmp))
        name = f"hf:{path}"
        hf = AutoTokenizer.from_pretrained(str(path))
        lines += ["", "## Full count: ctxbudget hf: vs transformers apply_chat_template", ""]
        lines += [
            "| tokens | ctxbudget | transformers | ratio (goal <= 1.0) |",
            "|---|---|---|---|",
        ]
        for size in (10_000, 100_000, 500_000):
            request = conversation(size)
            msgs = template_messages(request)
            total = count_request(request, name).total
            expected = len(hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True))
            assert total == expected, (total, expected)
            repeat = 3 if size >= 500_000 else 5
            ours = median(lambda r=request: count_request(r, name), repeat)
            theirs = median(
                lambda m=msgs: hf.apply_chat_template(m, add_generation_prompt=True, tokenize=True),
                repeat,
            )
            ratio = ours / theirs
            lines.append(
                f"| {total:,} | {ours * 1e3:.1f} ms | {theirs * 1e3:.1f} ms | {ratio:.2f}x |"
            )
            print(lines[-1], flush=True)
        lines += ["", "## Step: history + one new message, vs tokenising the new message alone", ""]
        lines += [
            "| counter | history tokens | step | new message alone | ratio (goal <= 1.3) |",
            "|---|---|---|---|---|",
        ]
        for counter, tokenizer in (("qwen3", get_tokenizer("qwen3")), (name, get_tokenizer(name))):
            alone = median(lambda t=tokenizer: t.encode(f"0 {NEW}"), 50)
            for size in (1_000, 10_000, 100_000, 1_000_000):
                base = conversation(size)
                took = step(counter, base, 3 if size >= 1_000_000 else 7)
                label = "qwen3" if counter == "qwen3" else "hf:qwen2.5 folder"
                lines.append(
                    f"| {label} | {size:,} | {took * 1e3:.3f} ms | {alone * 1e3:.3f} ms |"
                    f" {took / alone:.1f}x |"
                )
                print(lines[-1], flush=True)
    (HERE / "hf.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
