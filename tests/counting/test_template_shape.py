"""A message's loop text built from its proven shape equals what Jinja renders, its pieces equal
the tokenizer's, and a body that reads the content any other way is left to Jinja."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ctxbudget.counting.template_count as template_count
from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.hf import load_folder_template, render_template
from ctxbudget.counting.sandbox import Limits
from ctxbudget.counting.template_build import ShapeTexts, splitter
from ctxbudget.counting.template_loop import FakeLoop, plan_loop
from ctxbudget.errors import InputError
from ctxbudget.messages.model import Message, Request, ToolCall
from ctxbudget.tokens.registry import ExactTokenizer, get_tokenizer

LIMIT = 10**7
FOLDERS = ("llama3-cl100k", "smollm3-template", "hermes-2-pro-template", "qwen2.5")
MADE = {
    # each branch's output proven; loop.last in the key; tojson and trim of the content
    "branches": "{% for m in messages %}{% if m.role == 'user' %}<|start_header_id|>"
    "{{ m.content|trim }}<|eot_id|>{% elif m.content %}[{{ m.content|tojson }}]{% else %}"
    "(empty){% endif %}{% if loop.last %}<|eot_id|>{% endif %}{% endfor %}",
    # a literal whose end begins an added token: its pieces need a scan
    "straddles": "{% for m in messages %}{% set c = m.content if m.content is string else '' %}"
    "{{ '<|eot_id|><|eo' + c.lstrip('\\n') + m.role ~ (m.name if m.name is defined else '-') }}"
    "{% endfor %}",
    # and / or give an operand, ~ prints what it joins, tests on absent fields, a scope
    "operands": "{% for m in messages %}{% generation %}{% set r = m.name or 'anon' %}"
    "{{ r ~ '|' ~ (m.tool_call_id is defined) ~ '|' ~ m.nothing ~ '|' }}{% endgeneration %}"
    "{{ (m.content if loop.first else m.content | trim | tojson) + '<|eot_id|>' }}"
    "{% if not m.content and m.role != 'tool' %}-{% endif %}{{ m.content.rstrip('a ') }}"
    "{% endfor %}",
    # the content is tested for tool results only: the other roles stay proven
    "tested": "{% for m in messages %}{% if m.role == 'tool' and 'error' in m.content %}E"
    "{% endif %}<|eot_id|>{{ m.content }}{% endfor %}",
}
# Bodies whose text the shape does not decide (the content read other than through trim /
# tojson / strip, a position, a neighbour, a name the path has not set): never proven, and each
# would count wrong if it were.
UNPROVEN = {
    "a test of the text": "{% if 'x' in m.content %}A{% endif %}{{ m.content }}",
    "another filter": "{{ m.content | upper }}",
    "a length": "{% set c = m.content %}{% if c | length > 3 %}L{% endif %}{{ c }}",
    "an index": "{{ m.content[0] }}{{ m.content }}",
    "a comparison": "{% if m.content == 'hello' %}H{% endif %}{{ m.content }}",
    "the truth of a filtered text": "{% if m.content | trim %}T{% endif %}{{ m.content }}",
    "a method with a computed argument": "{{ m.content.strip(m.role) }}",
    "a position": "{{ loop.index0 }}{{ m.content }}",
    "a neighbour": "{% if loop.index0 > 0 %}{{ messages[loop.index0 - 1].role }}{% endif %}",
    "a name set later": "{{ x }}{% set x = 'a' %}{{ m.content }}",
    "a name set in a scope, read after it": "{% generation %}{% set r = 'a' %}{% endgeneration %}"
    "{{ r }}{{ m.content }}",
    "an inner loop": "{% for c in m.content %}{{ c }}{% endfor %}",
    "a membership of a computed name": "{% if m.role in m %}K{% endif %}{{ m.content }}",
    "a dict method": "{{ m.items() }}{{ m.content }}",
}


def _loop(source: str, messages: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    """The rewritten template's loop body (a macro) and its values from before the loop (with
    a tool list, which some templates require)."""
    plan = plan_loop(source)
    assert plan is not None
    got: list[tuple[Any, list[Any]]] = []

    def loop(view: Any, body: Any, outer: list[Any]) -> str:
        got.append((body, list(outer)))
        return ""

    tools = [{"type": "function", "function": {"name": "ls", "description": "", "parameters": {}}}]
    render_template(source, messages, tools, compiled=plan.template, ctxbudget_loop=loop)
    return got[0]


def _shapes(source: str, tokenizer: ExactTokenizer, outer: list[Any]) -> ShapeTexts:
    plan = plan_loop(source)
    assert plan is not None and plan.shapes is not None
    shapes = ShapeTexts(plan.shapes, splitter(tokenizer))
    shapes.use(outer)
    return shapes


def _shapes_of(
    source: str, messages: list[dict[str, Any]], tokenizer: ExactTokenizer
) -> ShapeTexts:
    """The shapes of ``source``'s loop body, with the values from before the loop that a render
    of ``messages`` gives."""
    return _shapes(source, tokenizer, _loop(source, messages)[1])


def _templates(hf_folder: Callable[[str], Path]) -> list[str]:
    found = [s for f in FOLDERS for _, s in load_folder_template(str(hf_folder(f))).templates]
    return [s for s in (*found, *MADE.values()) if plan_loop(s) is not None]


TEXT = st.lists(
    st.sampled_from(["a", " ", "\n", "<", "|", '"', "\\", "é", "🙂", "\x01"])
    | st.sampled_from(["<|eot_id|>", "<|eo", "t_id|>", "<|im_end|>", "error", "/think"]),
    max_size=12,
).map("".join)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system"]), "content": TEXT},
    optional={"name": st.sampled_from(["ls", "x"]), "tool_call_id": st.just("c1")},
)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(MESSAGE, min_size=1, max_size=4), which=st.integers(0, 10**6))
def test_a_proven_text_and_its_pieces_equal_what_jinja_and_the_tokenizer_give(
    hf_folder: Callable[[str], Path], messages: list[dict[str, Any]], which: int
) -> None:
    templates = _templates(hf_folder)
    source = templates[which % len(templates)]
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    try:
        body, outer = _loop(source, messages)
    except InputError:  # the template refuses these messages (Llama 3: no first user turn)
        assume(False)
    shapes = _shapes(source, tokenizer, outer)
    n = len(messages)
    for i, message in enumerate(messages):
        built = shapes.text(message, i, n, LIMIT)
        if built is None:
            continue
        loop = FakeLoop(i, n, messages)
        assert built[0] == str(body(message, loop, messages, *outer))
        if built[1] is not None:
            assert built[1] == tokenizer.pieces(built[0])


@pytest.mark.parametrize("what", sorted(UNPROVEN))
def test_a_body_the_shape_does_not_decide_is_left_to_jinja(
    hf_folder: Callable[[str], Path], what: str
) -> None:
    source = "{% for m in messages %}" + UNPROVEN[what] + "{% endfor %}"
    messages = [{"role": "user", "content": "hello x"}, {"role": "assistant", "content": "hi"}]
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    plan = plan_loop(source)
    assert plan is not None and plan.shapes is not None  # message-local: only the shape fails
    shapes = _shapes_of(source, messages, tokenizer)
    assert [shapes.text(m, i, 2, LIMIT) for i, m in enumerate(messages)] == [None, None]


def test_the_path_decides_what_is_proven(hf_folder: Callable[[str], Path]) -> None:
    """The tool branch reads the content's text; a user turn's branch does not."""
    source = MADE["tested"]
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    messages = [{"role": "user", "content": "an error"}, {"role": "tool", "content": "error"}]
    shapes = _shapes_of(source, messages, tokenizer)
    assert shapes.text(messages[0], 0, 2, LIMIT) == (
        "<|eot_id|>an error",
        ["<|eot_id|>", "an error"],
    )
    assert shapes.text(messages[1], 1, 2, LIMIT) is None


def test_a_literal_that_may_begin_a_token_is_cut_by_a_scan(
    hf_folder: Callable[[str], Path],
) -> None:
    """'<|eo' + 't_id|>' is one added token: the literal alone does not show it."""
    source = MADE["straddles"]
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    messages = [{"role": "user", "content": "t_id|>x"}]
    built = _shapes_of(source, messages, tokenizer).text(messages[0], 0, 1, LIMIT)
    assert built == ("<|eot_id|><|eot_id|>xuser-", None)
    assert tokenizer.pieces(built[0]) == ["<|eot_id|>", "<|eot_id|>", "xuser-"]


def test_an_empty_content_is_its_own_shape(hf_folder: Callable[[str], Path]) -> None:
    source = MADE["branches"]
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    messages = [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": ""}]
    shapes = _shapes_of(source, messages, tokenizer)
    assert [shapes.text(m, 0, 3, LIMIT) for m in messages] == [
        ('["a"]', ['["a"]']),
        ("(empty)", ["(empty)"]),
    ]
    assert shapes.text(messages[0], 2, 3, LIMIT) == (
        '["a"]<|eot_id|>',
        ['["a"]', "<|eot_id|>"],
    )


def test_llama3_turns_and_tool_results_are_built_and_cut_without_jinja(
    hf_folder: Callable[[str], Path],
) -> None:
    folder = hf_folder("llama3-cl100k")
    source = load_folder_template(str(folder)).templates[0][1]
    tokenizer = get_tokenizer(f"hf:{folder}")
    messages = [
        {"role": "user", "content": "  a question \n"},
        {"role": "assistant", "content": "an answer"},
        {"role": "tool", "content": 'out "1"', "tool_call_id": "c1"},
        {"role": "user", "content": "says <|eot_id|> itself"},
    ]
    shapes = _shapes_of(source, messages, tokenizer)
    built = [shapes.text(m, i, 4, LIMIT) for i, m in enumerate(messages)]
    assert built[0] == (
        "<|start_header_id|>user<|end_header_id|>\n\na question<|eot_id|>",
        ["<|start_header_id|>", "user", "<|end_header_id|>", "\n\na question", "<|eot_id|>"],
    )
    assert built[2] is not None and built[2][0].endswith('\n\n"out \\"1\\""<|eot_id|>')
    # an added token inside the content: the text is built, its pieces found by a scan
    assert built[3] is not None and built[3][1] is None
    assert all(b is not None for b in built)
    # a value past the sandbox's size limit is left to Jinja, which refuses it itself
    assert shapes.text(messages[1], 1, 4, 100) is None


def test_a_llama3_step_with_proven_texts_equals_a_fresh_count(
    hf_folder: Callable[[str], Path],
) -> None:
    counter = f"hf:{hf_folder('llama3-cl100k')}"
    stepped = RequestCounter(counter)
    history: tuple[Message, ...] = ()
    for i, (role, text) in enumerate(
        [
            ("user", " first question"),
            ("assistant", "<|eot_id|> inside"),
            ("user", "a < b and c | d"),
            ("tool", ""),
            ("assistant", "\n\nthe end\n"),
        ]
    ):
        history = (*history, Message(role=role, content=f"{text} {i}" if text else ""))  # type: ignore[arg-type]
        request = Request(system="Be brief.", messages=history)
        assert stepped.count(request) == count_request(request, counter)


def test_a_llama3_step_runs_jinja_only_for_a_message_it_cannot_prove(
    hf_folder: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new turn, reply or tool result is built from its shape (no template code runs, so no
    sandboxed run either); a reply with a tool call is not proven, and Jinja renders it."""
    counter = f"hf:{hf_folder('llama3-cl100k')}"
    runs: list[object] = []
    real = template_count.run_bounded

    def recording(call: Callable[[], object], limits: Limits) -> object:
        runs.append(call)
        return real(call, limits)

    monkeypatch.setattr(template_count, "run_bounded", recording)
    stepped = RequestCounter(counter)
    history: tuple[Message, ...] = (Message(role="user", content="list the files"),)
    stepped.count(Request(system="Be brief.", messages=history))
    call = ToolCall(id="c1", name="ls", arguments='{"path": "."}')
    for message, jinja in [
        (Message(role="assistant", content="", tool_calls=(call,)), True),
        (Message(role="tool", content="a.py\nb.py", tool_call_id="c1"), False),
        (Message(role="assistant", content="Two files."), False),
        (Message(role="user", content="and now?"), False),
    ]:
        history = (*history, message)
        request = Request(system="Be brief.", messages=history)
        runs.clear()
        assert stepped.count(request) == count_request(request, counter)
        assert bool(runs) is jinja


@pytest.mark.parametrize("name", sorted(MADE))
def test_each_made_template_proves_turns(hf_folder: Callable[[str], Path], name: str) -> None:
    """The property above compares something for every made template: its turns are proven."""
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    messages = [{"role": "user", "content": " x "}, {"role": "assistant", "content": "y"}]
    _, outer = _loop(MADE[name], messages)
    shapes = _shapes(MADE[name], tokenizer, outer)
    assert all(shapes.text(m, i, 2, LIMIT) is not None for i, m in enumerate(messages))


PRINTED_THRICE = (
    "{% for m in messages %}{% set c = m.content %}<|start_header_id|>{{ m.role }}"
    "<|end_header_id|>{{ c }}{{ c }}{{ c }}<|eot_id|>{% endfor %}"
)


def test_a_value_printed_often_counts_each_time_against_the_size_limit(
    hf_folder: Callable[[str], Path],
) -> None:
    """A content set once and printed three times makes a text three times its size: past the
    sandbox's limit that is Jinja's to refuse, not the shape's to build (found in review)."""
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    message = {"role": "user", "content": "ab " * 100}
    _, outer = _loop(PRINTED_THRICE, [message])
    shapes = _shapes(PRINTED_THRICE, tokenizer, outer)
    built = shapes.text(message, 0, 1, LIMIT)
    assert built is not None and built[0].count("ab " * 100) == 3
    text_size = len(built[0])
    assert shapes.text(message, 0, 1, 2 * text_size) is not None  # the bound is a sum: above
    assert shapes.text(message, 0, 1, text_size - 50) is None  # one copy would still fit


def test_a_negative_zero_before_the_loop_is_not_the_zero_after_it(
    hf_folder: Callable[[str], Path],
) -> None:
    """``-0.0 == 0.0``, but a template prints them apart: shapes made under one are not reused
    under the other (found in review)."""
    source = (
        "{% set z = (messages|length - 2) * 0.0 %}{% for m in messages %}<|start_header_id|>"
        "{{ m.role }}<|end_header_id|>{{ z }}{{ m.content }}<|eot_id|>{% endfor %}"
    )
    tokenizer = get_tokenizer(f"hf:{hf_folder('llama3-cl100k')}")
    message = {"role": "user", "content": "hi"}
    shapes = _shapes(source, tokenizer, [-0.0])
    assert shapes.text(message, 0, 1, LIMIT) is not None
    assert "-0.0hi" in shapes.text(message, 0, 1, LIMIT)[0]  # type: ignore[index]
    shapes.use([0.0])
    assert "|>0.0hi" in shapes.text(message, 0, 1, LIMIT)[0]  # type: ignore[index]


def test_a_splitter_refuses_added_tokens_whose_prefixes_would_not_fit() -> None:
    """Its prefix set holds every proper prefix: a 20,000-character token would be 200 MB."""
    tokenizer = get_tokenizer("qwen3")
    assert splitter(tokenizer).usable  # Qwen3's added tokens are short

    class Long:
        added_tokens = frozenset({"<" + "x" * 2_000 + ">"})
        pieces = staticmethod(tokenizer.pieces)
        is_cut_token = staticmethod(tokenizer.is_cut_token)

    from ctxbudget.counting.template_build import Splitter

    assert not Splitter(Long()).usable  # type: ignore[arg-type]
    assert Splitter(Long()).cuts(("a",)) is None  # type: ignore[arg-type]
