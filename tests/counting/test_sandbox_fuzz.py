"""Random Jinja over the grammar templates may use: no crash, no hang, no large allocation.

``make fuzz`` runs this with the "fuzz" Hypothesis profile (10,000 examples); every example is
rendered under a 0.25 s deadline with its time and traced peak memory checked.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxbudget.counting.hf import render_template
from ctxbudget.counting.sandbox import Limits
from ctxbudget.errors import InputError

pytestmark = pytest.mark.fuzz

LIMITS = Limits(seconds=0.25)
MESSAGES = [{"role": "user", "content": "hello 数据"}, {"role": "assistant", "content": "hi"}]
BIG = ["10**9", "10**6", "999999", "2**20", "100000", "-1", "0"]
numbers = st.integers(-5, 300).map(str) | st.sampled_from(BIG)
strings = st.sampled_from(["'x'", "'ab'", "''", "'%0999999999d'", "'{:>99999999}'", "'\\n'"])
atoms = numbers | strings | st.sampled_from(["messages", "messages[0].content", "[1, 2]", "r"])
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~"]
FILTERS = [
    "length", "upper", "list", "string", "first", "last", "reverse", "sort", "unique", "tojson",
    "center({n})", "indent({n})", "replace('x', {s})", "replace('', {s})", "join({s})",
    "batch({n})", "truncate({n})", "wordwrap({n})", "format({n})", "tojson(indent={n})",
    "int", "sum", "default({s})",
]  # fmt: skip
CALLS = ["range({n})", "lipsum({n})", "{s}.format({n})", "{s}.center({n})", "{s}.ljust({n})",
         "{s}.split()", "{s}.replace({s}, {s})", "{s}.join([{s}, {s}])", "{s}.zfill({n})",
         "namespace(a={n}).a", "{s}.expandtabs({n})"]  # fmt: skip


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 3 or draw(st.integers(0, 3)) == 0:
        return draw(atoms)
    kind = draw(st.sampled_from(["binop", "filter", "call", "paren"]))
    inner = draw(expressions(depth + 1))
    fill = {"n": draw(numbers), "s": draw(strings)}
    if kind == "binop":
        return f"({inner} {draw(st.sampled_from(BINOPS))} {draw(expressions(depth + 1))})"
    if kind == "filter":
        return f"({inner} | {draw(st.sampled_from(FILTERS)).format(**fill)})"
    if kind == "call":
        return draw(st.sampled_from(CALLS)).format(**fill)
    return f"({inner})"


@st.composite
def templates(draw: st.DrawFn) -> str:
    body = "{{ " + draw(expressions()) + " }}"
    for _ in range(draw(st.integers(0, 3))):  # nested loops, some over 100,000 items
        over = st.sampled_from(["range(3)", "messages", "r", "range(" + draw(numbers) + ")"])
        body = "{% for i in " + draw(over)
        body += " %}" + body + "{% endfor %}"
    return "{% set r = range(100000) %}" + body


# The watchdog's timeout can land in Hypothesis's own GC-timing callback, which drops it with a
# warning; the watchdog raises it again 50 ms later, so the render still ends (timed below).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@given(template=templates())
def test_random_templates_end_in_time_and_memory(template: str) -> None:
    tracemalloc.start()
    start = time.monotonic()
    try:
        try:
            out = render_template(template, MESSAGES, limits=LIMITS)
            assert isinstance(out, str) and len(out) <= LIMITS.max_output
        except InputError as exc:
            assert "\n" not in str(exc)
        elapsed = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < LIMITS.seconds + 2.0, template
    assert peak < 512 * 2**20, (template, peak)
