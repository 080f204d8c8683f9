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

import counting as counting_bench  # bench/counting.py, beside this script
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
# A realistic agent step: a tool result carrying a real source file (~2,000 tokens).
SOURCE = (HERE.parent / "tests" / "data" / "estimators" / "python.txt").read_text("utf-8")
TOOL_RESULT = SOURCE[: SOURCE.index("\n", 8_000) + 1]  # its first ~8,000 characters


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
    return counting_bench.conversation(tokens, per_message, paragraph=TEXT, paragraph_tokens=40)


def median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step(counter: str, base: Request, repeat: int, tool: bool = False) -> float:
    """Median seconds to count ``base`` + one new message, ``base`` already counted; the new
    message takes the other role than the last one (user after a reply, reply after a user),
    or with ``tool`` is a tool result (``i`` + the source file) after the last reply."""
    role = "assistant" if base.messages[-1].role == "user" else "user"
    times = []
    for i in range(repeat):
        rc = RequestCounter(counter)
        rc.count(base)
        added = (
            Message(role="tool", content=f"{i} {TOOL_RESULT}")
            if tool
            else Message(role=role, content=f"{i} {NEW}")
        )
        new = base.with_messages((*base.messages, added))
        start = time.perf_counter()
        rc.count(new)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def full_counts(name: str, path: Path, label: str) -> list[str]:
    """ctxbudget vs transformers on one folder, equal counts asserted."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(path))
    out = []
    for size in (10_000, 100_000, 500_000):
        request = conversation(size)
        msgs = template_messages(request)

        def theirs_once(m: list[dict[str, object]] = msgs) -> int:
            return len(hf.apply_chat_template(m, add_generation_prompt=True, tokenize=True))

        total = count_request(request, name).total
        assert total == theirs_once(), (total, theirs_once())
        repeat = 3 if size >= 500_000 else 5
        ours = median(lambda r=request: count_request(r, name), repeat)
        theirs = median(theirs_once, repeat)
        out.append(
            f"| {label} | {total:,} | {ours * 1e3:.1f} ms | {theirs * 1e3:.1f} ms"
            f" | {ours / theirs:.2f}x |"
        )
        print(out[-1], flush=True)
    return out


def main() -> None:
    lines = ["# hf: model folders vs transformers", ""]
    lines += [
        "Command: `PYTHONPATH=src .venv/bin/python bench/hf.py` (transformers 4.57, one run)."
    ]
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            "hf:qwen2.5 folder": folder("qwen2.5", Path(tmp)),
            "hf:Llama-3 folder": folder("llama3-cl100k", Path(tmp)),
        }
        lines += ["", "## Full count: ctxbudget vs transformers apply_chat_template(tokenize=True)"]
        lines += ["", "| folder | tokens | ctxbudget | transformers | ratio (goal <= 1.0) |"]
        lines.append("|---|---|---|---|---|")
        for label, path in folders.items():
            lines += full_counts(f"hf:{path}", path, label)
        lines += ["", "## Step: history + one new message, vs tokenising the new message alone", ""]
        lines += [
            "| counter | appended | history tokens | step | new message alone |"
            " ratio (goal <= 1.3) |",
            "|---|---|---|---|---|---|",
        ]
        counters = {"qwen3": "qwen3", **{k: f"hf:{v}" for k, v in folders.items()}}
        for label, counter in counters.items():
            tokenizer = get_tokenizer(counter)
            # The baseline: the same tokenizer object's encode of the new message's text.
            alone = median(lambda t=tokenizer: t.encode(f"0 {NEW}", special=True), 50)
            alone_tool = median(lambda t=tokenizer: t.encode(f"0 {TOOL_RESULT}", special=True), 50)
            for size in (1_000, 10_000, 100_000, 1_000_000):
                even = conversation(size)
                cases = [(even, False), (even.with_messages(even.messages[:-1]), False)]
                for base, tool in [*cases, (even, True)]:
                    took = step(counter, base, 3 if size >= 1_000_000 else 7, tool)
                    kind = "reply" if base.messages[-1].role == "user" else "user turn"
                    kind, base_s = (
                        ("tool result (~2K tokens)", alone_tool) if tool else (kind, alone)
                    )
                    lines.append(
                        f"| {label} | {kind} | {size:,} | {took * 1e3:.3f} ms |"
                        f" {base_s * 1e3:.3f} ms | {took / base_s:.1f}x |"
                    )
                    print(lines[-1], flush=True)
    (HERE / "hf.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
