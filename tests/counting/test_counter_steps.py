"""A step of the built-in Qwen counter re-tokenises only the new message; counts stay exact.

A reply that a new message follows re-renders (Qwen3 drops its empty ``<think>`` block), and a
tool result that another follows loses its ``<|im_end|>``: their bodies keep their counts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import replace

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from tests.counting.strategies import messages

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting import qwen as qwen_module
from ctxbudget.counting import scheme as scheme_module
from ctxbudget.counting.qwen import NO_QUERY, QWEN_TEMPLATES, last_query_index
from ctxbudget.messages.model import (
    ImagePart,
    Message,
    Request,
    TextPart,
    ToolCall,
    common_prefix,
    extends,
)
from ctxbudget.tokens.registry import ExactTokenizer, get_tokenizer

QUERY = Message(role="user", content="Which tests fail?")
CALL = ToolCall("c1", "run_tests", '{"path": "tests"}')


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The texts the qwen3 tokenizer encodes while the test runs."""
    tokenizer: ExactTokenizer = get_tokenizer("qwen3")
    texts: list[str] = []
    real = tokenizer.encode

    def recording(text: str, *, special: bool | None = None) -> list[int]:
        texts.append(text)
        return real(text, special=special)

    monkeypatch.setattr(tokenizer, "encode", recording)
    yield texts


def _step(counter: RequestCounter, request: Request, new: Message, texts: list[str]) -> Request:
    """Count ``request`` + ``new`` after ``request``; check it equals a full count and leave in
    ``texts`` only what the step encoded."""
    counter.count(request)
    texts.clear()
    grown = request.with_messages((*request.messages, new))
    got = counter.count(grown)
    step = list(texts)
    assert got == count_request(grown, "qwen3")
    texts[:] = step
    return grown


USER = Message(role="user", content="Fix test_parser.")
TOOL = Message(role="tool", content="1 failed, 11 passed", tool_call_id="c1")
PLAIN = Message(role="assistant", content="All 12 pass except test_parser.")
CALLING = Message(role="assistant", content="Running them.", tool_calls=(CALL,))
THINKING = Message(role="assistant", content="", reasoning="Check first.", tool_calls=(CALL,))


@pytest.mark.parametrize(
    ("reply", "new"),
    [(PLAIN, USER), (PLAIN, TOOL), (CALLING, USER), (CALLING, TOOL), (THINKING, TOOL)],
)
def test_step_after_a_reply_encodes_only_the_new_message(
    reply: Message, new: Message, encoded: list[str]
) -> None:
    counter = RequestCounter("qwen3")
    # Equal copies, other objects: the fixed framings get counted here, nothing of ``reply``.
    counter.count(Request(messages=(QUERY, replace(reply), replace(new))))
    _step(counter, Request(messages=(QUERY, reply)), new, encoded)
    assert len(encoded) == 1 and new.text in encoded[0]  # the new turn (its body), only
    assert not any((reply.text or CALL.name) in text for text in encoded)
    assert not any(reply.reasoning and reply.reasoning in text for text in encoded)


def test_a_new_user_turn_encodes_its_text_alone(encoded: list[str]) -> None:
    """The turn's frame is counted once per role; a step tokenises the text, as alone."""
    counter = RequestCounter("qwen3")
    counter.count(Request(messages=(replace(QUERY), PLAIN, replace(USER))))
    _step(counter, Request(messages=(QUERY, PLAIN)), USER, encoded)
    assert encoded == [USER.text]


def test_step_after_a_tool_result_encodes_only_the_new_result(encoded: list[str]) -> None:
    first = Message(role="tool", content="first result", tool_call_id="c1")
    second = Message(role="tool", content="second result", tool_call_id="c2")
    reply = Message(role="assistant", content="", tool_calls=(CALL, CALL))
    counter = RequestCounter("qwen3")
    counter.count(Request(messages=(QUERY, reply, replace(first), replace(second))))
    _step(counter, Request(messages=(QUERY, reply, first)), second, encoded)
    assert encoded == ["\nsecond result\n"]


def test_reply_starting_with_a_newline_is_counted_whole(encoded: list[str]) -> None:
    """The empty ``<think>`` block's ``lstrip`` changes such a reply: no cut, a real recount."""
    reply = Message(role="assistant", content="\n\nDone.")
    counter = RequestCounter("qwen3")
    _step(counter, Request(messages=(QUERY, reply)), QUERY, encoded)
    assert "<|im_start|>assistant\n\n\nDone.<|im_end|>\n" in encoded


replies = st.builds(
    lambda text, calls: Message(role="assistant", content=text, tool_calls=calls),
    st.sampled_from(["", "\n", " ", "\t", "\n\n", "Done", "数据", "<think>", "1"]).flatmap(
        lambda first: st.text(max_size=6).map(lambda rest: first + rest)
    ),
    st.sampled_from([(), (CALL,), (CALL, CALL)]),
)


@settings(max_examples=150)
@given(conversation=st.lists(replies | messages(), min_size=1, max_size=10))
def test_qwen3_append_one_by_one_equals_full_recount(conversation: list[Message]) -> None:
    """The reply and tool cuts, under every flag change an append brings, equal a full count."""
    counter = RequestCounter("qwen3")
    request = Request()
    for message in conversation:
        request = request.with_messages((*request.messages, message))
        assert counter.count(request) == count_request(request, "qwen3")


@pytest.mark.parametrize(
    "shape",
    [
        lambda m: m.role == "assistant" and m.text == "",
        lambda m: m.role == "assistant" and m.text[:1] == "\n",
        lambda m: m.role == "assistant" and m.text[:1] in (" ", "\t"),
        lambda m: m.role == "assistant" and m.text[:1].isalnum() and not m.reasoning,
        lambda m: m.role == "assistant" and bool(m.tool_calls) and m.text[:1].isalnum(),
        lambda m: m.role == "assistant" and bool(m.reasoning),
        lambda m: m.role == "tool",
    ],
)
def test_generated_messages_reach_both_the_cut_and_the_fallback(
    shape: Callable[[Message], bool],
) -> None:
    """The shared ``messages()`` strategy (used by the incremental property of test_counter.py)
    draws replies that take the cut and replies that fall back to a whole count."""
    assert shape(
        find(
            messages(),
            shape,
            settings=settings(max_examples=2000, database=None, phases=[Phase.generate]),
        )
    )


def test_common_prefix_by_identity_or_value() -> None:
    a, b, c = (Message(role="user", content=t) for t in "abc")
    assert common_prefix((a, b), (a, b, c)) == 2
    assert common_prefix((a, b, c), (a, b)) == 2
    assert common_prefix((a, b), (a, c, b)) == 1
    assert common_prefix((a, b), (Message(role="user", content="a"), b)) == 2
    assert common_prefix((), (a,)) == 0
    # Every cut of a long history (found by prefix compares, not a loop), an equal copy before it.
    history = tuple(Message(role="user", content=f"m{i}") for i in range(40))
    for cut in range(40):
        edited = (*history[:3], Message(role="user", content="m3"), *history[4:cut], c)
        assert common_prefix(history, edited) == max(cut, 4)
        assert common_prefix(edited, history) == common_prefix(history, edited)
    with pytest.raises(TypeError):  # what _starts_with relies on: messages have no order
        assert a <= b  # type: ignore[operator]


def test_a_request_made_by_append_knows_what_it_extends(encoded: list[str]) -> None:
    base = Request(system="Be brief.", messages=(USER, CALLING))
    grown = base.append(TOOL)
    assert grown.messages == (USER, CALLING, TOOL) and grown == base.with_messages(grown.messages)
    assert extends(grown, base.messages)
    assert not extends(grown, (USER, CALLING))  # by identity: an equal tuple proves nothing
    assert not extends(base.with_messages(grown.messages), base.messages)
    assert not extends(replace(grown, system="Other."), base.messages)
    assert not extends(replace(grown, messages=(USER,)), base.messages)
    counter = RequestCounter("qwen3")
    counter.count(base)
    encoded.clear()
    got = counter.count(grown)
    step = list(encoded)
    assert got == count_request(grown, "qwen3")
    assert any(TOOL.content in text for text in step)
    assert not any(USER.content in text for text in step)  # the history was not rendered
    assert counter.count(grown.append(PLAIN)) == count_request(grown.append(PLAIN), "qwen3")


roles = st.sampled_from(["user", "assistant", "tool"])
turns = st.builds(
    lambda role, wrapped: Message(
        role=role, content="<tool_response>\nok\n</tool_response>" if wrapped else "ok"
    ),
    roles,
    st.booleans(),
)


@given(conversation=st.lists(turns, max_size=8), data=st.data())
def test_last_query_after_an_append_looks_at_the_new_messages_only(
    conversation: list[Message], data: st.DataObject
) -> None:
    """Given the index for ``messages[:start]``, the search from ``start`` finds the index a
    full search finds: with a query before ``start``, with none, and with none at all."""
    start = data.draw(st.integers(0, len(conversation)))
    previous = last_query_index(conversation[:start])
    assert last_query_index(conversation, start, previous) == last_query_index(conversation)


@pytest.mark.parametrize("counter_name", ["qwen3", "o200k_base", "ctxbudget"])
def test_a_step_is_an_estimate_exactly_while_an_image_is_in_the_request(counter_name: str) -> None:
    """An image's tokens are estimated (its size decides them): the count is ``estimate`` while
    the image's message is in the request, whatever came after it, and ``exact`` again once a
    compaction dropped it; each step equals a fresh count."""
    picture = Message(
        role="user",
        content=(TextPart("What is on this screenshot?"), ImagePart(width=640, height=480)),
    )
    counter = RequestCounter(counter_name)
    request = Request(messages=(QUERY, PLAIN))
    steps = [
        request,
        request := request.append(picture),
        request := request.append(PLAIN),  # the image is no longer the last message
        request := request.append(USER, CALLING, TOOL),
        request := request.with_messages(request.messages[3:]),  # compacted: the image dropped
        request.append(PLAIN),
    ]
    kinds = []
    for step in steps:
        got = counter.count(step)
        assert got == count_request(step, counter_name)
        kinds.append(got.kind)
    exact = "exact" if counter_name == "qwen3" else "estimate"  # estimators are never exact
    assert kinds == [exact, "estimate", "estimate", "estimate", exact, exact]


@pytest.mark.parametrize(
    ("history", "new", "flagged"),
    [
        ((QUERY, PLAIN), USER, 1),  # a new query after a reply
        ((QUERY,), PLAIN, 0),  # a reply
        ((QUERY, CALLING), TOOL, 1),  # a tool result after a call
        ((QUERY, CALLING, TOOL), TOOL, 2),  # a second result
    ],
)
def test_a_loops_usual_step_is_the_general_step_with_one_new_message(
    history: tuple[Message, ...], new: Message, flagged: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One message appended runs the same rules as any other step (issue 31: no one-message
    path beside it): the pivot is looked for among the new message only, and flags are worked
    out from the old last message on; the count is a full count's."""
    calls: list[tuple[str, int]] = []
    rules = QWEN_TEMPLATES["qwen3"]

    def pivot(messages: Sequence[Message], start: int = 0, previous: int = NO_QUERY) -> int:
        calls.append(("pivot", start))
        return rules.pivot(messages, start, previous)

    def flags(messages: Sequence[Message], start: int, pivot: int) -> list[Hashable]:
        calls.append(("flags", start))
        return rules.flags(messages, start, pivot)

    monkeypatch.setitem(QWEN_TEMPLATES, "qwen3", replace(rules, pivot=pivot, flags=flags))
    request = Request(messages=history)
    grown = request.append(new)
    counter = RequestCounter("qwen3")
    counter.count(request)
    calls.clear()
    got = counter.count(grown)
    assert calls == [("pivot", len(history)), ("flags", flagged)]
    assert got == count_request(grown, "qwen3")


def test_a_new_query_two_replies_after_the_last_one_recounts_the_reasoning_reply() -> None:
    """A reasoning reply before the old last message loses its ``<think>`` when a query comes:
    a step counts more than the old last message and the new one."""
    reasoned = Message(role="assistant", content="Done.", reasoning="Check first.")
    request = Request(messages=(QUERY, reasoned, PLAIN))
    counter = RequestCounter("qwen3")
    counter.count(request)
    grown = request.append(USER)
    assert counter.count(grown) == count_request(grown, "qwen3")
    assert counter.count(grown).per_message[1] < counter.count(request).per_message[1]


def test_a_new_last_message_in_place_of_the_old_one_is_no_append() -> None:
    """The history with its last message replaced (a retry, an edit) shares all but one
    message with the request counted before, as an append does, yet the old last one's pivot
    is not the history's: a reply in place of a query is after the last query."""
    counter = RequestCounter("qwen3")
    history = Request(messages=(QUERY, PLAIN))
    counter.count(history.append(USER))  # the pivot: the new query, at index 2
    retried = history.append(Message(role="assistant", content="Done"))
    assert counter.count(retried) == count_request(retried, "qwen3")


def test_a_step_that_fails_midway_leaves_the_counter_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tokenizer failure inside a step (here a MemoryError) changes nothing the counter
    keeps: the next step still knows the image is in the request (review: the estimates were
    cut before the failing loop, so the next step said ``exact``)."""
    picture = Message(role="user", content=(TextPart("pic"), ImagePart(width=64, height=64)))
    base = Request(messages=(QUERY, picture, PLAIN))
    counter = RequestCounter("qwen3")
    counter.count(base)
    tokenizer = get_tokenizer("qwen3")
    real = tokenizer.encode

    def failing(text: str, *, special: bool | None = None) -> list[int]:
        if "BOOM" in text:
            raise MemoryError("simulated")
        return real(text, special=special)

    monkeypatch.setattr(tokenizer, "encode", failing)
    with pytest.raises(MemoryError):
        counter.count(Request(messages=(QUERY, Message(role="user", content="BOOM"))))
    grown = base.append(Message(role="user", content="And now?"))
    assert counter.count(grown) == count_request(grown, "qwen3")
    assert counter.count(grown).kind == "estimate"


def test_a_step_calls_no_min_range_or_zip_with_a_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step keeps off the interpreter's C paths that a full count's loop does not run: the
    first step after counting a long request finds them out of the CPU caches (issue 31's
    1M-token step row; the comment in ``MessageCounts.count`` says what callgrind showed)."""
    calls: list[str] = []

    def spy_range(*args: int) -> range:
        calls.append("range")
        return range(*args)

    def spy_zip(*args: Iterable[object], **kwargs: bool) -> Iterator[tuple[object, ...]]:
        if kwargs:
            calls.append(f"zip({', '.join(kwargs)}=...)")
        return zip(*args, **kwargs)  # noqa: B905 the keywords as given

    def spy_min(*args: int) -> int:
        calls.append("min")
        return min(*args)

    monkeypatch.setattr(scheme_module, "zip", spy_zip, raising=False)
    monkeypatch.setattr(scheme_module, "min", spy_min, raising=False)
    monkeypatch.setattr(qwen_module, "range", spy_range, raising=False)
    request = Request(messages=(QUERY, PLAIN))
    counter = RequestCounter("qwen3")
    counter.count(request)
    calls.clear()
    grown = request.append(USER)  # a new query: the pivot moves, the old reply's flags change
    got = counter.count(grown)
    assert calls == []
    assert got == count_request(grown, "qwen3")  # a full count, which may zip strictly
