"""One place decides what changed between two requests; every scheme offers one interface."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from ctxbudget.counting import TEMPLATES, count_request
from ctxbudget.counting.select import choose_scheme
from ctxbudget.messages.model import NOTHING_KEPT, Message, Request, ToolSpec, what_changed

A, B, C = (Message(role="user", content=t) for t in ("a", "b", "c"))
TOOL = ToolSpec(name="look", description="Look it up.")


def test_what_changed_reports_the_kept_prefix_and_the_head() -> None:
    """Kept messages by identity or value, all of them or some, the head as it was or not."""
    base = Request(system="Be brief.", messages=(A, B))
    assert what_changed(None, base) == NOTHING_KEPT
    grown = base.append(C)  # known to extend: nothing compared
    assert what_changed(base, grown) == (2, True, True, False)
    copied = Request(system="Be brief.", messages=(A, Message(role="user", content="b"), C))
    assert what_changed(base, copied) == (2, True, True, False)  # equal by value
    edited = base.with_messages((A, C))
    assert what_changed(base, edited) == (1, False, True, False)
    assert what_changed(base, replace(base, tools=(TOOL,))) == (2, True, False, False)
    assert what_changed(base, replace(base, system="Other.")) == (2, True, False, False)
    assert what_changed(base, base.with_messages(base.messages)).same  # the same tuple
    assert what_changed(base, base.with_messages((A,))) == (1, False, True, False)


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_built_in_scheme_counts_whole_and_step_by_step_by_one_interface(
    template: str,
) -> None:
    """``count`` and ``incremental().count`` of any scheme give the same count; no caller
    needs to know which kind of scheme it holds."""
    scheme = choose_scheme(
        "qwen3.6" if template.startswith("qwen3.") else "qwen3", template=template
    )
    first = Request(system="Be brief.", tools=(TOOL,), messages=(A,))
    state = scheme.incremental()
    before: Request | None = None
    for request in (first, first.append(B), first.append(B).append(C), first.with_messages((C,))):
        assert state.count(request, what_changed(before, request)) == scheme.count(request)
        before = request


def test_a_folder_template_offers_the_same_interface(hf_folder: Callable[[str], Path]) -> None:
    name = f"hf:{hf_folder('llama3-cl100k')}"
    scheme = choose_scheme(name)
    request = Request(system="Be brief.", messages=(A, B))
    state = scheme.incremental()
    assert state.count(request, NOTHING_KEPT) == scheme.count(request)
    assert scheme.count(request) == count_request(request, name)


def test_the_qwen36_template_is_named_as_its_tokenizer() -> None:
    """``qwen3.6`` names the template as the tokenizer is named; ``qwen3.5`` stays an alias."""
    request = Request(system="Be brief.", messages=(A,))
    assert count_request(request, "qwen3.6", template="qwen3.6") == count_request(
        request, "qwen3.6", template="qwen3.5"
    )
    assert "qwen3.6" in TEMPLATES
