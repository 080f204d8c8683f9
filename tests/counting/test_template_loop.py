"""Which templates have a message-local loop (rendered message by message), and which do not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.hf import load_folder_template
from ctxbudget.counting.template_loop import LoopMemo, plan_loop
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.registry import get_tokenizer

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


def test_a_step_renders_and_tokenises_only_the_new_message(
    hf_folder: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Llama 3: a step after an edit of the last message, then after a pure append, encodes
    just the changed message's new text; each count equals a fresh one."""
    counter = f"hf:{hf_folder('llama3-cl100k')}"
    tokenizer = get_tokenizer(counter)
    encoded: list[str] = []
    real, real_one = tokenizer.count_special_many, tokenizer.count_special

    def recording(texts: list[str]) -> list[int]:
        encoded.extend(texts)
        return real(texts)

    def recording_one(text: str) -> int:  # a step's one new piece
        encoded.append(text)
        return real_one(text)

    monkeypatch.setattr(tokenizer, "count_special_many", recording)
    monkeypatch.setattr(tokenizer, "count_special", recording_one)
    turns = tuple(
        Message(role="user" if i % 2 == 0 else "assistant", content=f"turn {i} of the talk")
        for i in range(6)
    )
    stepped = RequestCounter(counter)
    stepped.count(Request(system="Be brief.", messages=turns))
    for new in (
        (*turns[:-1], Message(role="assistant", content="an edited last turn")),
        (*turns, Message(role="user", content="a new question")),
        (
            *turns,
            Message(role="user", content="a new question"),
            Message(role="assistant", content="a reply"),
        ),
    ):
        encoded.clear()
        request = Request(system="Be brief.", messages=new)
        got = stepped.count(request)
        assert [text.strip() for text in encoded] == [new[-1].text]
        assert got == count_request(request, counter)


def test_the_first_stale_position_follows_the_kept_prefix_and_compares_nothing() -> None:
    """The first ``known`` items are the very ones of the last run (the request's kept
    prefix): the loop renders from the one after them; the memo keeps no items to compare."""
    plan = plan_loop(LOCAL)
    assert plan is not None
    memo = LoopMemo(plan, lambda text, pieces: (len(text), (False, False)), outer=())
    memo.texts = ["text"] * 6
    assert memo._first_stale(6, (), known=4) == 4  # item 4 edited
    assert memo._first_stale(7, (), known=6) == 5  # an append: ``loop.last`` moves
    assert memo._first_stale(6, ("other",), known=6) == 0  # other values from the head
