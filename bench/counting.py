"""Benchmarks of whole-request counting: incremental steps, litellm, raw tiktoken.

Run: .venv/bin/python bench/counting.py   (litellm: pip install -e '.[bench]')
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.qwen import QwenScheme
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.registry import get_tokenizer

PARAGRAPH = (
    "The agent read the file, found the failing assertion in the parser and proposed a fix "
    "that keeps the public interface unchanged while handling empty input. "
)


def conversation(
    tokens: int, per_message: int = 500, *, paragraph: str = PARAGRAPH, paragraph_tokens: int = 30
) -> Request:
    """About ``tokens`` tokens of alternating user/assistant messages of ~``per_message`` each,
    made of ``paragraph`` (about ``paragraph_tokens`` tokens) repeated."""
    text = paragraph * max(1, per_message // paragraph_tokens)
    n = max(2, tokens // per_message)
    msgs = tuple(
        Message(role="user" if i % 2 == 0 else "assistant", content=f"{i}: {text}")
        for i in range(n)
    )
    return Request(system="You are a careful coding agent.", messages=msgs)


def median_time(fn: Callable[[], object], repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_time(counter_name: str, base: Request, repeat: int = 15) -> float:
    """Median seconds to count ``base`` + one new message, with ``base`` already counted."""
    times = []
    for i in range(repeat):
        counter = RequestCounter(counter_name)
        counter.count(base)
        new = base.with_messages(
            (*base.messages, Message(role="user", content=f"{i} {PARAGRAPH * 16}"))
        )
        start = time.perf_counter()
        counter.count(new)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_append() -> None:
    print("## Appending one message and recounting (qwen3, exact)")
    results = {}
    for size in (1_000, 10_000, 100_000, 1_000_000):
        base = conversation(size)
        total = count_request(base, "qwen3").total
        results[size] = step_time("qwen3", base, repeat=5 if size == 1_000_000 else 15)
        print(f"  {size:>9,} target ({total:>9,} counted): step {results[size] * 1e3:8.3f} ms")
    print(f"  1M / 1K step cost: {results[1_000_000] / results[1_000]:.2f}x (goal <= 2x)")


def bench_litellm() -> None:
    print("## At 200K tokens: one incremental step vs a full litellm.token_counter")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch
    try:
        import litellm
    except ImportError:
        print("  litellm not installed: pip install -e '.[bench]'")
        return
    base = conversation(200_000)
    ours = step_time("o200k_base", base, repeat=15)
    new = base.with_messages((*base.messages, Message(role="user", content=PARAGRAPH * 16)))
    body = [{"role": "system", "content": new.system}] + [
        {"role": m.role, "content": m.text} for m in new.messages
    ]
    theirs = median_time(lambda: litellm.token_counter(model="gpt-4o", messages=body), repeat=3)
    print(f"  ctxbudget step {ours * 1e3:.3f} ms; litellm full {theirs * 1e3:.1f} ms;"
          f" ratio {theirs / ours:,.0f}x (goal >= 100x)")  # fmt: skip


def bench_full_vs_tiktoken() -> None:
    print("## Full exact count (qwen3 template) vs raw tiktoken encoding of the rendered text")
    tok = get_tokenizer("qwen3")
    raw = tok._special  # the tiktoken Encoding.encode(allowed_special="all") the tokenizer wraps
    for size in (10_000, 200_000):
        request = conversation(size)
        text = QwenScheme(tokenizer=tok).render(request)
        assert count_request(request, "qwen3").total == len(raw(text))
        ours = median_time(lambda r=request: count_request(r, "qwen3"))
        base = median_time(lambda t=text: raw(t))
        ratio = ours / base
        print(f"  {size:>7,} tokens: count_request {ours * 1e3:7.2f} ms;"
              f" tiktoken {base * 1e3:7.2f} ms; ratio {ratio:.2f}x (goal <= 1.2x)")  # fmt: skip


if __name__ == "__main__":
    bench_append()
    bench_litellm()
    bench_full_vs_tiktoken()
