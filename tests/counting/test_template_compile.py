"""Compiling a chat template is bounded: its length, its parse tree's size and depth are checked
before it compiles, and nothing of it runs while it compiles (issue 26, item 7). Numbers for the
limits: src/ctxbudget/counting/sandbox.py (MAX_TEMPLATE_CHARS, _NODES, _DEPTH)."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest
from tests.child import run_python
from tests.counting.hf_oracle import run_cli

from ctxbudget.counting.hf import compile_template, load_folder_template, render_template
from ctxbudget.counting.sandbox import MAX_TEMPLATE_CHARS, MAX_TEMPLATE_DEPTH, MAX_TEMPLATE_NODES
from ctxbudget.errors import InputError


def refused(source: str, match: str, seconds: float = 2.0) -> str:
    """``compile_template(source)``'s one-line InputError (matching ``match``), raised fast."""
    start = time.monotonic()
    with pytest.raises(InputError, match=match) as info:
        compile_template(source)
    assert time.monotonic() - start < seconds
    message = str(info.value)
    assert "\n" not in message and message.startswith("chat template")
    return message


def test_a_template_over_the_length_limit_is_refused() -> None:
    compile_template("x" * MAX_TEMPLATE_CHARS)  # plain text at the limit compiles
    message = refused("x" * (MAX_TEMPLATE_CHARS + 1), "over the limit of 262,144")
    assert f"{MAX_TEMPLATE_CHARS + 1:,} characters" in message and "shorten it" in message


def test_a_template_with_too_many_nodes_is_refused() -> None:
    # One node per {{x}} (a Name: adjacent outputs share one Output node), and two more.
    dense = "{{x}}" * (MAX_TEMPLATE_NODES - 1)
    assert len(dense) < MAX_TEMPLATE_CHARS
    refused(dense, f"over {MAX_TEMPLATE_NODES:,} blocks, expressions and text pieces", 6.0)


def nested(opening: str, closing: str, times: int, inner: str = "") -> str:
    return opening * times + inner + closing * times


@pytest.mark.parametrize(
    "source",
    [
        nested("{% if x %}", "{% endif %}", 70),
        nested("{% if x %}", "{% endif %}", 400),  # the parser recurses: RecursionError
        nested("{% for a in x %}", "{% endfor %}", 70),
        nested("{% for a in x %}", "{% endfor %}", 400),
        nested("{% macro m() %}", "{% endmacro %}", 70),
        nested("{% macro m() %}", "{% endmacro %}", 400),
        nested("{{ [", "] }}", 1, nested("[", "]", 70, "x")),
        nested("{{ (", ") }}", 1, nested("(", ")", 100, "x")),  # no nodes: RecursionError
        nested("{{ (", ") }}", 1, nested("(", ")", 2000, "x")),
    ],
    ids=lambda source: f"{source[:12]}..{len(source)}",
)
def test_deeply_nested_blocks_and_brackets_are_refused(source: str) -> None:
    message = refused(source, "flatten it")
    assert f"at most {MAX_TEMPLATE_DEPTH} levels" in message


@pytest.mark.parametrize("link", [" + x", " - x", " and x", "|trim", ".a", "()", " if x else x"])
def test_a_long_chain_is_refused_as_too_deep(link: str) -> None:
    # A chain parses in a loop into a tree as deep as it is long; compiling it recursed (Jinja,
    # then Python: a chain of 300 filters took 20 s, then a SyntaxError).
    refused("{{ x" + link * 300 + " }}", f"over {MAX_TEMPLATE_DEPTH} levels deep")


def test_nesting_at_the_depth_limit_compiles() -> None:
    # The root, then 62 ifs, then the innermost test's name: 64 levels.
    inner = MAX_TEMPLATE_DEPTH - 2
    compile_template("{% if x %}" * inner + "{% endif %}" * inner)
    refused("{% if x %}" * (inner + 1) + "{% endif %}" * (inner + 1), "64 levels deep")


def test_chains_compile_without_re_walking_each_level() -> None:
    # 300 chains of 60 filters (within the depth and node limits): Jinja's optimizer walked
    # every sub-chain again at each level, about 0.1 s a chain.
    source = ("{{ x" + "|trim" * 60 + " }}") * 300
    start = time.monotonic()
    template = compile_template(source)
    assert time.monotonic() - start < 5.0
    assert template is compile_template(source)  # cached
    assert render_template(source, [], x=" a ") == "a" * 300


def test_no_filter_runs_while_compiling() -> None:
    # Jinja folded constant filters as it compiled, outside any deadline, and wrote each result
    # into the code: every {{ 'x' | center(999999) }} added 1 MB.
    source = "{{ 'x' | center(999999) }}" * 200
    tracemalloc.start()
    try:
        compile_template(source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert render_template("{{ 'ab' | center(6) }}|{{ [1, 2] | tojson }}", []) == "  ab  |[1, 2]"


def test_a_compile_error_names_pythons_limit_in_one_line() -> None:
    # 30 nested loops are within MAX_TEMPLATE_DEPTH but over Python's 20 nested blocks.
    nested = "{% for a in x %}" * 30 + "{% endfor %}" * 30
    refused(nested, "does not compile: SyntaxError: too many statically nested blocks")


def test_running_out_of_memory_while_compiling_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ctxbudget.counting.hf import environment

    def exhausted(source: str) -> None:
        raise MemoryError

    monkeypatch.setattr(environment(), "parse", exhausted)
    message = refused("{{ 'out of memory' }}", "ran out of memory compiling its 21 characters")
    assert f"at most {MAX_TEMPLATE_CHARS:,}" in message and "shorten it" in message


def test_a_big_chat_template_file_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    with (tmp_path / "chat_template.jinja").open("wb") as file:
        file.truncate(64 * 2**20)  # sparse: 64 MiB of NUL bytes that take no disk
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="67,108,864 bytes, over the limit of 262,144"):
            load_folder_template(str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"{peak / 2**20:.0f} MiB"


def _hf_folder(root: Path, template: str) -> Path:
    from tests.counting.test_hf import _build_folder

    folder = _build_folder(root, "{{ messages[0].content }}")
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    return folder


def test_cli_exit_2_one_line_for_a_template_over_the_limit(tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path / "m", "x" * (MAX_TEMPLATE_CHARS + 1))
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "utf-8")
    code, out, err = run_cli(["request", str(body), "--model", f"hf:{folder}"])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "over the limit of 262,144" in err


def test_cli_exit_2_one_line_for_a_deep_template(tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path / "m", "{{ " + "(" * 500 + "x" + ")" * 500 + " }}")
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "utf-8")
    code, out, err = run_cli(["request", str(body), "--model", f"hf:{folder}"])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "flatten it" in err


_COMPILE = """
import resource, sys, time
from ctxbudget.counting.hf import compile_template
from ctxbudget.errors import InputError
source = sys.stdin.read()
start = time.process_time()
try:
    compile_template(source)
    print("compiled", end=" ")
except InputError as exc:
    print(str(exc).splitlines()[0][:60], end=" ")
print(f"{time.process_time() - start:.1f}")
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


def compile_in_child(source: str, max_mb: int, timeout: float) -> tuple[str, float, float]:
    """Compile ``source`` in a child limited to ``max_mb`` of address space, killed past
    ``timeout`` seconds: (outcome, CPU seconds, peak RSS in MiB)."""
    done = run_python(_COMPILE, memory=max_mb * 2**20, timeout=timeout, stdin=source)
    assert done.returncode == 0, done.stderr[-2000:]
    first, peak_kb = done.stdout.splitlines()
    outcome, cpu = first.rsplit(" ", 1)
    return outcome, float(cpu), int(peak_kb) / 1024


def test_a_10_mb_template_is_refused_within_memory() -> None:
    # Unbounded: 2.5 MB took 18 s and 1.4 GB to compile, 10 MB ran out of memory.
    outcome, cpu, peak_mb = compile_in_child("{{ x }}" * (10 * 2**20 // 7), 512, timeout=60)
    assert outcome.startswith("chat template is 10,485,75") and "over the limit" in outcome
    assert cpu < 1.0 and peak_mb < 128


@pytest.mark.reliability
@pytest.mark.parametrize("unit", ["{{x}}", "{{x(x,x,x)}}", "{{x+x+x+x}}", "{{ [x, x, x, x] }}"])
def test_the_densest_template_allowed_compiles_within_memory(unit: str) -> None:
    # The worst shapes at the node limit, measured: 1.1 to 1.8 s of CPU, 0.2 to 0.3 GB at peak.
    from ctxbudget.counting.hf import environment

    one, two = (_nodes(environment().parse(unit * n)) for n in (1, 2))
    per, fixed = two - one, 2 * one - two  # the root and the Output node adjacent ones share
    source = unit * ((MAX_TEMPLATE_NODES - fixed) // per)
    outcome, cpu, peak_mb = compile_in_child(source, 1024, timeout=120)
    assert outcome == "compiled"
    assert cpu < 10.0 and peak_mb < 512, (cpu, peak_mb)


def _nodes(tree: object) -> int:
    count, stack = 0, [tree]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.iter_child_nodes())  # type: ignore[attr-defined]
    return count
