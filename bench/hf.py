"""hf: model folders: full count vs transformers, and the incremental step vs tokenising the
new message alone (built-in qwen3 and four hf: folders). Writes bench/hf.md.

Run: PYTHONPATH=src .venv/bin/python bench/hf.py   (needs the dev extra: transformers)
``--max-size N --repeats R`` (the quick run of ``run_all.py``): histories of at most N tokens
(each table keeps its smallest size), at most R timed steps a row; ``--out DIR``: the block goes
to DIR/hf.md.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import counting as counting_bench  # bench/counting.py, beside this script
from blocks import add_out_argument, write_block  # bench/blocks.py, beside this script
from ctxbudget.counting import PerMessage, RequestCount, RequestCounter, count_request
from ctxbudget.counting.template_input import message_text, template_messages
from ctxbudget.messages.model import Message, Request, ToolSpec, extends
from ctxbudget.replay.importers import load_trace
from ctxbudget.tokens.registry import get_tokenizer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))  # tests/conftest.py: the stored folders, unpacked
from tests.conftest import data_file, hf_folder_at  # noqa: E402

TEXT = (
    "The agent read the file, found the failing assertion in the parser and proposed a fix. "
    "代理读取了文件，找到了解析器中失败的断言。 🙂 "
)
NEW = "Please also run the tests again and report which ones still fail. " * 8
LONG = TEXT * 12  # about the size of each history message (~500 tokens)
# A realistic agent step: a tool result carrying a real source file (~2,000 tokens).
SOURCE = data_file("estimators", "python.txt").read_text("utf-8")
TOOL_RESULT = SOURCE[: SOURCE.index("\n", 8_000) + 1]  # its first ~8,000 characters
READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file of the repository.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


# Timed steps per row (and as many baselines): a ~110-token row times 30-600 us, where the
# shared machine's noise moves a median of 41 by +-0.05 of the ratio.
REPEATS = {NEW: 201, LONG: 101, TOOL_RESULT: 41}
FULL_SIZES = (10_000, 100_000, 500_000)
"""History tokens of the full-count table."""
STEP_SIZES = (1_000, 10_000, 100_000, 1_000_000)
"""History tokens of the step tables (synthetic and real steps)."""
FLOOR_SIZES = (10_000, 1_000_000)
"""History tokens of the floor table."""


def conversation(tokens: int, per_message: int = 500) -> Request:
    return counting_bench.conversation(tokens, per_message, paragraph=TEXT, paragraph_tokens=40)


def step(counter: str, base: Request, repeat: int, added_text: str) -> tuple[float, float]:
    """Median seconds of a step and of tokenising a new message alone, each timed right after
    the same work.

    A step counts the previous request + one new message, the previous request counted just
    before by the same counter, as in a loop, and made as the agent loop makes it
    (``Request.append``: the counter knows what it extends; a request made otherwise is
    compared with the last one message by message, ~6 ns a message on this machine). The
    previous request is ``base`` with its last message made new each turn (``i`` first), so
    what a real step re-renders of it (Qwen3's reply losing its empty ``<think>``) is rendered
    here too, once, while the history keeps its size. The new message (``added_text``) takes
    the other role than the last one (user after a reply, reply after a user), or is a tool
    result when it is ``TOOL_RESULT``.
    The baseline is the tokenizer's ``count_special(text)`` (its cheapest exact count: a
    Hugging Face folder's encode without the list of ids, as the step counts) of another new
    text of the same kind. Turns alternate: one times the step; the next times the baseline
    right where the step would start, then counts the step untimed, so the next turn starts
    from the same state. Timed after other work instead (counting some other request, which
    drops the step's message), the baseline ran 5-8% faster at 1M tokens than where the step
    starts. Each side tokenises a text it has not seen, as a loop does: timing the step's own
    text again right after would find it in the CPU caches, 5-25% faster. Garbage collection
    is off while timing.
    """
    last = base.messages[-1]
    role = "assistant" if last.role == "user" else "user"
    tokenizer = get_tokenizer(counter)
    rc = RequestCounter(counter)
    kind = "tool" if added_text is TOOL_RESULT else role
    steps, alone = [], []

    def previous(tag: str) -> Request:
        last_text = f"{tag} {message_text(last)}"
        return base.with_messages((*base.messages[:-1], replace(last, content=last_text)))

    gc.collect()
    gc.disable()
    try:
        for i in range(2 * repeat + 6):  # the first six warm the caches up
            before = previous(f"{i}")
            new = before.append(Message(role=kind, content=f"{i} {added_text}"))
            rc.count(before)
            start = time.perf_counter()
            if i % 2:
                tokenizer.count_special(f"{i}b {added_text}")
                took = time.perf_counter() - start
                rc.count(new)
            else:
                rc.count(new)
                took = time.perf_counter() - start
            if i >= 6:
                (alone if i % 2 else steps).append(took)
    finally:
        gc.enable()
    return statistics.median(steps), statistics.median(alone)


def trace_steps() -> list[list[Message]]:
    """What each call of the four real sessions in tests/data/traces appended to the one
    before: the previous call's reply, then the messages added since (tool results, user
    turns), in order; the sessions one after another."""
    roles = {"assistant": "assistant", "tool": "tool", "toolResult": "tool"}
    steps: list[list[Message]] = []
    for path in sorted(data_file("traces").glob("*.json*")):
        calls = load_trace(path).calls
        for before, call in itertools.pairwise(calls):
            added = [before.reply] if before.reply is not None else []
            added += call.added
            steps.append([Message(role=roles.get(m.role, "user"), content=m.text) for m in added])
    return [s for s in steps if s]


def real_steps(counter: str, base: Request, steps: list[list[Message]]) -> tuple[float, ...]:
    """The real sessions' steps replayed after ``base``, each counted by one RequestCounter
    right after the one before, as in a loop, and the same tokenizer's ``count_special`` of
    fresh copies of each step's new texts. The two take turns going first: the second finds the
    text in the CPU caches (5-25% faster on a 100-token text), so each side gets half the
    steps cold and half warm, and a slower spell of the shared machine hits both. Returns
    (total step time, total time tokenising alone, median of the per-step ratios, that median
    over steps of < 200 new tokens, their number, median new tokens per step)."""
    tokenizer = get_tokenizer(counter)
    rc = RequestCounter(counter)
    request = base
    rc.count(request)
    took: list[float] = []
    alone: list[float] = []
    sizes: list[int] = []
    copies = [[(m.text + ".")[:-1] for m in added] for added in steps]

    def tokenise(texts: list[str]) -> None:
        start = time.perf_counter()
        sizes.append(sum(tokenizer.count_special(text) for text in texts))
        alone.append(time.perf_counter() - start)

    gc.collect()
    gc.disable()
    try:
        for i, added in enumerate(steps):
            request = request.append(*added)
            if i % 2:
                tokenise(copies[i])
            start = time.perf_counter()
            rc.count(request)
            took.append(time.perf_counter() - start)
            if not i % 2:
                tokenise(copies[i])
    finally:
        gc.enable()
    ratios = [a / b for a, b in zip(took, alone, strict=True)]
    small = [r for r, n in zip(ratios, sizes, strict=True) if n < 200]
    return (
        sum(took),
        sum(alone),
        statistics.median(ratios),
        statistics.median(small),
        len(small),
        statistics.median(sizes),
    )


def real_step_rows(counters: dict[str, str], sizes: Sequence[int]) -> list[str]:
    steps = trace_steps()
    lines = [
        "",
        "## Real agent steps: the four sessions of tests/data/traces, after a history",
        "",
        f"{len(steps)} steps; each appends what its session appended between two calls (the",
        "reply, then tool results or user turns).",
        "",
        "| counter | history tokens | all steps | tokenising alone | ratio of totals |"
        " median step ratio | median ratio, steps < 200 tokens (n) | median new tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, counter in counters.items():
        for size in sizes:
            base = conversation(size)
            if "tools" in label:
                base = replace(base, tools=(READ_FILE,))
            took, alone, median, small, n, tokens = real_steps(counter, base, steps)
            lines.append(
                f"| {label} | {size:,} | {took * 1e3:.1f} ms | {alone * 1e3:.1f} ms |"
                f" {took / alone:.2f}x | {median:.2f}x | {small:.2f}x ({n}) | {tokens:.0f} |"
            )
            print(lines[-1], flush=True)
    return lines


class AppendFloor:
    """The least an append step can do in Python, for comparison only: each message framed as a
    plain Qwen turn, no flags, no pivot, no tools, the history proven by ``Request.append``;
    a new message's text tokenised alone. Exact for none of the requests here (no empty
    ``<think>`` blocks): it shows the floor, not a count. ``stem``'s counts are kept, so a
    request appended to it is counted from them."""

    def __init__(self, stem: Request) -> None:
        self.tokenizer = get_tokenizer("qwen3")
        self.stem = stem.messages
        self.stem_counts = [self._one(m) for m in self.stem]
        self.messages: tuple[Message, ...] = ()
        self.counts: list[int] = []
        self.total = 0

    def _one(self, message: Message) -> int:
        return self.tokenizer.count_special(message_text(message)) + 5

    def count(self, request: Request) -> RequestCount:
        messages = request.messages
        if not extends(request, self.messages):
            assert extends(request, self.stem)
            self.messages, self.counts = self.stem, list(self.stem_counts)
            self.total = sum(self.counts)
        for message in messages[len(self.messages) :]:
            self.counts.append(self._one(message))
            self.total += self.counts[-1]
        self.messages = messages
        return RequestCount(
            counter="floor",
            kind="estimate",
            total=self.total,
            system=0,
            tools=0,
            messages=self.total,
            per_message=PerMessage(self.counts, len(self.counts), self.counts[-1]),
            floor=0,
        )


def floor_rows(sizes: Sequence[int], repeat: int = 301) -> list[str]:
    """qwen3's step and AppendFloor's against tokenising alone, taking turns in one loop; each
    timed right after its counter counted a previous request (the history with its last
    message new), from the state a step leaves, as in ``step``."""
    lines = [
        "",
        "## The floor: qwen3's step vs the least an append step can do in Python",
        "",
        "`AppendFloor` (bench/hf.py): no flags, pivot or tools, not exact; steps taken in turn",
        "with qwen3's and with tokenising alone, in one loop.",
        "",
        "| appended | history tokens | qwen3 step | floor step | alone | qwen3 | floor |",
        "|---|---|---|---|---|---|---|",
    ]
    tokenizer = get_tokenizer("qwen3")
    for size in sizes:
        even = conversation(size)
        for kind, base in (("user turn", even), ("reply", even.with_messages(even.messages[:-1]))):
            role = "assistant" if base.messages[-1].role == "user" else "user"
            stem, last = base.with_messages(base.messages[:-1]), base.messages[-1]
            qwen3 = RequestCounter("qwen3")
            sides: dict[str, Any] = {"qwen3": qwen3, "floor": AppendFloor(stem)}
            took: dict[str, list[float]] = {"qwen3": [], "floor": [], "alone": []}

            def before(tag: str, stem: Request = stem, last: Message = last) -> Request:
                return stem.append(replace(last, content=f"{tag} {message_text(last)}"))

            gc.collect()
            gc.disable()
            try:
                for i in range(repeat):
                    for name, counter in sides.items():
                        previous = before(f"{i}{name}")
                        new = previous.append(Message(role=role, content=f"{i}{name} {NEW}"))
                        counter.count(previous)
                        start = time.perf_counter()
                        counter.count(new)
                        took[name].append(time.perf_counter() - start)
                    previous = before(f"{i}alone")  # as where qwen3's step starts
                    qwen3.count(previous)
                    text = f"{i}alone {NEW}"
                    start = time.perf_counter()
                    tokenizer.count_special(text)
                    took["alone"].append(time.perf_counter() - start)
                    qwen3.count(previous.append(Message(role=role, content=text)))
            finally:
                gc.enable()
            q, f, a = (statistics.median(took[k][10:]) for k in ("qwen3", "floor", "alone"))
            lines.append(
                f"| {kind} (~110 tokens) | {size:,} | {q * 1e6:.1f} us | {f * 1e6:.1f} us |"
                f" {a * 1e6:.1f} us | {q / a:.2f}x | {f / a:.2f}x |"
            )
            print(lines[-1], flush=True)
    return lines


def full_counts(name: str, path: Path, label: str, sizes: Sequence[int]) -> list[str]:
    """ctxbudget vs transformers on one folder, equal counts asserted."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(path))
    out = []
    for size in sizes:
        request = conversation(size)
        msgs = template_messages(request)

        def theirs_once(m: list[dict[str, object]] = msgs) -> int:
            return len(hf.apply_chat_template(m, add_generation_prompt=True, tokenize=True))

        total = count_request(request, name).total
        assert total == theirs_once(), (total, theirs_once())
        repeat = 3 if size >= 500_000 else 5
        ours = counting_bench.median_time(lambda r=request: count_request(r, name), repeat)
        theirs = counting_bench.median_time(theirs_once, repeat)
        out.append(
            f"| {label} | {total:,} | {ours * 1e3:.1f} ms | {theirs * 1e3:.1f} ms"
            f" | {ours / theirs:.2f}x |"
        )
        print(out[-1], flush=True)
    return out


def up_to(sizes: Sequence[int], largest: int | None) -> list[int]:
    """``sizes`` of at most ``largest`` tokens, the smallest kept whatever ``largest`` is."""
    if largest is None:
        return list(sizes)
    return [s for s in sizes if s <= largest] or [min(sizes)]


def main(argv: Sequence[str] | None = None) -> None:
    """Run every table and write the block of bench/hf.md (of ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-size", type=int, metavar="TOKENS", help="leave out histories over TOKENS tokens"
    )
    parser.add_argument("--repeats", type=int, help="at most this many timed steps a row")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    repeats = {text: min(n, args.repeats or n) for text, n in REPEATS.items()}
    lines = ["# hf: model folders vs transformers", ""]
    lines += [
        "Command: `PYTHONPATH=src .venv/bin/python bench/hf.py` (transformers 4.57, one run)."
    ]
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            "hf:qwen2.5 folder": hf_folder_at("qwen2.5", Path(tmp)),
            "hf:Llama-3 folder": hf_folder_at("llama3-cl100k", Path(tmp)),
        }
        lines += ["", "## Full count: ctxbudget vs transformers apply_chat_template(tokenize=True)"]
        lines += ["", "| folder | tokens | ctxbudget | transformers | ratio (goal <= 1.0) |"]
        lines.append("|---|---|---|---|---|")
        for label, path in folders.items():
            lines += full_counts(f"hf:{path}", path, label, up_to(FULL_SIZES, args.max_size))
        lines += ["", "## Step: history + one new message, vs tokenising the new message alone", ""]
        lines += [
            "| counter | appended | history tokens | step | new message alone | step - alone |"
            " ratio (goal <= 1.3) |",
            "|---|---|---|---|---|---|---|",
        ]
        counters = {"qwen3": "qwen3", **{k: f"hf:{v}" for k, v in folders.items()}}
        # Two more real templates, with a tool list (Hermes-2-Pro then uses its tool_use one).
        more = (("SmolLM3", "smollm3-template"), ("Hermes-2-Pro", "hermes-2-pro-template"))
        for label, name in more:
            counters[f"hf:{label} folder + tools"] = f"hf:{hf_folder_at(name, Path(tmp))}"
        for label, counter in counters.items():
            for size in up_to(STEP_SIZES, args.max_size):
                even = conversation(size)
                if "tools" in label:
                    even = replace(even, tools=(READ_FILE,))
                odd = even.with_messages(even.messages[:-1])  # ends with a user turn
                cases = [
                    ("user turn (~110 tokens)", even, NEW),
                    ("reply (~110 tokens)", odd, NEW),
                    ("reply (~500 tokens)", odd, LONG),
                    ("tool result (~2K tokens)", even, TOOL_RESULT),
                ]
                for kind, base, text in cases:
                    took, alone = step(counter, base, repeats[text], text)
                    lines.append(
                        f"| {label} | {kind} | {size:,} | {took * 1e3:.3f} ms |"
                        f" {alone * 1e3:.3f} ms | {(took - alone) * 1e6:+.0f} us |"
                        f" {took / alone:.2f}x |"
                    )
                    print(lines[-1], flush=True)
        lines += real_step_rows(counters, up_to(STEP_SIZES, args.max_size))
        # the floor's loop drops its first 10 turns (warm-up), then times the rest
        floor_repeat = min(301, 10 + args.repeats) if args.repeats else 301
        lines += floor_rows(up_to(FLOOR_SIZES, args.max_size), floor_repeat)
    # Its block of bench/hf.md; the title (lines[0]) is the section's heading, outside it.
    write_block(args.out / "hf.md", "hf.py", "\n".join(lines[1:]))


if __name__ == "__main__":
    main()
