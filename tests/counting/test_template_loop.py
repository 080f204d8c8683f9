"""Which templates have a message-local loop (rendered message by message), and which do not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ctxbudget.counting.hf import load_folder_template
from ctxbudget.counting.template_loop import plan_loop

LOCAL = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if loop.last %}.{% endif %}"
    "{% endfor %}"
)


@pytest.mark.parametrize(
    ("folder", "planned"),
    [("llama3-cl100k", True), ("smollm3-template", True), ("qwen2.5", True)],
)
def test_real_templates_with_a_message_local_loop(
    folder: str, planned: bool, hf_folder: Callable[[str], Path]
) -> None:
    source = load_folder_template(str(hf_folder(folder))).templates[0][1]
    assert (plan_loop(source) is not None) is planned


@pytest.mark.parametrize(
    "template",
    [
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}",
        "{% for m in messages %}{{ strftime_now('%S') }}{{ m.content }}{% endfor %}",
        "{% for m in messages %}{{ messages[0].content }}{% endfor %}",
        "{% for m in messages %}{{ loop.cycle('a', 'b') }}{% endfor %}",
        "{% for m in messages %}{% for c in m.content %}{{ messages[loop.index0] }}{% endfor %}"
        "{% endfor %}",
        "{% for m in messages if m.role != 'system' %}{{ m.content }}{% endfor %}",
    ],
)
def test_loops_that_carry_state_or_look_far_are_rendered_whole(template: str) -> None:
    assert plan_loop(template) is None


def test_a_local_loop_is_planned_with_its_dependencies() -> None:
    plan = plan_loop(LOCAL)
    assert plan is not None and plan.loop_attrs == {"last"} and plan.outer == ()
