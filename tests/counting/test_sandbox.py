"""The template sandbox bounds time and memory: each hostile template of issue 17 fails fast,
in one line, without a large allocation (time and peak memory measured in each test)."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest
from tests.counting.hf_oracle import run_cli

from ctxbudget.counting.hf import render_template
from ctxbudget.counting.sandbox import Limits
from ctxbudget.errors import InputError

MESSAGES = [{"role": "user", "content": "hi"}]
FAST = Limits(seconds=1.0)
HOSTILE = [
    "{{ 'x' * 10**9 }}",
    "{{ ([1] * 10**9) | length }}",
    "{{ 9 ** 999999 }}",
    "{{ lipsum(10**7) }}",
    "{{ lipsum(n=1000, max=1000) }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}",
    "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}",
    "{{ '%0999999999d' % 1 }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ 'x' | center(10**8) }}",
    "{{ ('\\n' * 100000) | indent(999999) }}",
    "{{ ('x' * 4000000) | replace('x', 'yyyyyyyyyy') }}",
    "{{ ('ab' * 1000) | replace('', 'x' * 100000) }}",
    "{{ (range(100000) | list) | join('x' * 1000) }}",
    "{{ messages | tojson(indent=10**6) }}",
    "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% for i in range(100000) %}"
    "{{ 'x' * 1000 }}{% endfor %}",
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{% set x %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}{{ x }}",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_template_fails_fast_in_one_line_within_memory(template: str) -> None:
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(InputError) as info:
            render_template(template, MESSAGES, limits=FAST)
        elapsed = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < FAST.seconds + 2.0
    assert peak < 256 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert "\n" not in str(info.value) and str(info.value).startswith("chat template")


def test_ordinary_templates_are_unaffected() -> None:
    template = (
        "{% for m in messages %}{{ '<|' ~ m.role ~ '|>' + m.content * 2 }}{{ 2 ** 10 }}"
        "{{ '%5s' % 'a' }}{{ '{:>4}'.format('b') }}{{ m | tojson(indent=2) }}{% endfor %}"
        "{{ lipsum(2, html=False) | length > 0 }}{{ 123456789 | string }}"
    )
    out = render_template(template, MESSAGES, limits=FAST)
    assert out.startswith("<|user|>hihi1024    a   b{\n")


def test_dict_attributes_read_as_in_jinjas_own_sandbox() -> None:
    """``m.role`` skips Jinja's failed attribute lookup; a key named like a dict method, a
    method, a missing key and a subclass read as Jinja's own immutable sandbox reads them."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Tagged(dict[str, object]):
        tag = "class attribute"

    template = (
        "{% for m in messages %}{{ m.role }}|{{ m.items is callable }}|{{ m.get('role') }}|"
        "{{ m.keys | string | length > 0 }}|{{ m.missing is defined }}|{{ m.tag }};{% endfor %}"
    )
    messages = [
        {"role": "user", "items": "a key", "keys": "another"},
        Tagged(role="tool", tag="a key"),
        {"role": "assistant", "copy": "a key"},
    ]
    theirs = ImmutableSandboxedEnvironment().from_string(template).render(messages=messages)
    assert render_template(template, messages, limits=FAST) == theirs
    assert theirs.startswith("user|True|user|True|False|;tool|True|tool|True|False|class")


def test_deadline_is_the_render_deadline() -> None:
    slow = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    start = time.monotonic()
    with pytest.raises(InputError, match="deadline"):
        render_template(slow, MESSAGES, limits=Limits(seconds=0.3))
    assert time.monotonic() - start < 2.0
    assert render_template("{{ 1 }}", MESSAGES, limits=Limits(seconds=0.3)) == "1"  # still usable


def test_cli_exit_2_one_line_for_a_hostile_folder_template(tmp_path: Path) -> None:
    from tests.counting.test_hf import _build_folder

    folder = _build_folder(tmp_path / "m", "{{ 'x' * 10**9 }}")
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"messages": MESSAGES}), encoding="utf-8")
    code, out, err = run_cli(["request", str(body), "--tokenizer", f"hf:{folder}"])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "sandbox" in err


_AFTER_RENDERS = """
import sys, time
from ctxbudget.counting.hf import render_template
from ctxbudget.counting.sandbox import Limits
from ctxbudget.errors import InputError

msgs = [{"role": "user", "content": "hi"}]
for _ in range(3):
    render_template("{% for m in messages %}{{ m.content }}{% endfor %}", msgs)
if sys.argv[1] == "timeout":
    try:
        render_template(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            msgs,
            limits=Limits(seconds=0.2),
        )
    except InputError:
        pass
    time.sleep(0.2)  # the watchdog fires again 50 ms after its first timeout: nothing pending


def work(n):
    return sum(i for i in range(n))


sys.settrace(lambda *args: None)  # what pdb, coverage and cProfile do
work(1000)
sys.settrace(None)
print("ok")
"""


@pytest.mark.parametrize("case", ["plain", "timeout"])
def test_a_tracer_still_runs_after_renders(case: str, tmp_path: Path) -> None:
    # The watchdog once cleared a thread's async exception with SetAsyncExc(NULL) after every
    # render, which leaves CPython's signal set: on 3.11 the next traced call spun for ever.
    import subprocess
    import sys

    script = tmp_path / "after.py"
    script.write_text(_AFTER_RENDERS, encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(script), case],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
