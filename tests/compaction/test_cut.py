"""Cut points: a tool call and its results are never parted; long tool pairs are shortened."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.compaction.fakes import (
    asks,
    call,
    coding_session,
    message_tokens,
    reply,
    result,
    tool_pairs_ok,
    user,
)

from ctxbudget.compaction.cut import (
    cut_point,
    cut_points,
    head_end,
    shorten_step,
    shorten_text,
    steps,
    turns,
    valid_cut,
)
from ctxbudget.messages.model import Message

CONVO = (
    user("task"),  # 0
    asks(call("a", "read_file", path="x.py"), call("b", "read_file", path="y.py")),  # 1
    result("a", "A"),  # 2
    result("b", "B"),  # 3
    reply("done reading"),  # 4
    user("next"),  # 5
    asks(call("c", "run", command="ls")),  # 6
    result("c", "C"),  # 7
)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    """Random well-formed conversations: user turns, tool steps with 0-3 calls, odd sizes."""
    out: list[Message] = []
    n = 0
    for t in range(draw(st.integers(1, 5))):
        out.append(user(f"turn {t} " + "u" * draw(st.integers(0, 400))))
        for _ in range(draw(st.integers(0, 4))):
            k = draw(st.integers(0, 3))
            ids = [f"id{n + j}" for j in range(k)]
            n += k
            out.append(
                asks(
                    *(call(i, "run", command="x") for i in ids), text="t" * draw(st.integers(0, 50))
                )
            )
            out.extend(result(i, "o" * draw(st.integers(0, 3000))) for i in ids)
        if draw(st.booleans()):
            out.append(reply("r" * draw(st.integers(0, 200))))
    return tuple(out)


@pytest.mark.parametrize(
    ("i", "ok"),
    [
        (0, True),
        (1, True),
        (2, False),
        (3, False),
        (4, True),
        (5, True),
        (6, True),
        (7, False),
        (8, True),
    ],
)
def test_valid_cut_never_inside_a_tool_pair(i: int, ok: bool) -> None:
    assert valid_cut(CONVO, i) is ok


def test_turns_start_at_user_messages_and_steps_keep_pairs() -> None:
    assert [(s.start, s.stop) for s in turns(CONVO)] == [(0, 5), (5, 8)]
    assert [(s.start, s.stop) for s in steps(CONVO)] == [(0, 1), (1, 4), (4, 5), (5, 6), (6, 8)]


def test_head_end_pins_leading_summary_and_first_task() -> None:
    summary = Message(role="user", content="s", meta={"summary": True})
    assert head_end((summary, *CONVO)) == 2
    assert head_end(CONVO) == 1


@given(conversations())
@settings(max_examples=80, deadline=None)
def test_every_cut_leaves_both_sides_paired(convo: tuple[Message, ...]) -> None:
    head = head_end(convo)
    for p in cut_points(convo):
        if p >= head:
            assert tool_pairs_ok((*convo[:head], *convo[p:]))
            assert tool_pairs_ok(convo[:p])


@given(conversations(), st.integers(0, 3000))
@settings(max_examples=80, deadline=None)
def test_cut_point_fits_budget_or_keeps_only_the_last_step(
    convo: tuple[Message, ...], budget: int
) -> None:
    sizes = [message_tokens(m) for m in convo]
    head = head_end(convo)
    cut = cut_point(convo, sizes, budget, start=head)
    assert valid_cut(convo, cut)
    last = steps(convo)[-1].start if convo else 0
    assert sum(sizes[cut:]) <= budget or cut == max(last, head) or cut == len(convo)


def test_cut_point_prefers_turn_start_then_steps_in_one_long_turn() -> None:
    sizes = [message_tokens(m) for m in CONVO]
    # Room for everything after message 4: the turn start at 5 is chosen over step 4.
    assert cut_point(CONVO, sizes, sum(sizes[4:]), start=1) == 5
    session = coding_session(12)
    sizes = [message_tokens(m) for m in session]
    cut = cut_point(session, sizes, sum(sizes[-6:]), start=1)
    assert cut == len(session) - 6  # no user turn to cut at: a step boundary


def test_shorten_step_keeps_head_tail_and_pairing() -> None:
    text = "HEAD-LINE\n" + "filler line\n" * 3000 + "AssertionError: boom\n"
    step = (asks(call("z", "run", command="pytest")), result("z", text))
    short = shorten_step(step, 300, message_tokens)
    assert sum(message_tokens(m) for m in short) <= 300
    assert tool_pairs_ok(short)
    out = short[1]
    assert out.tool_call_id == "z" and out.text.startswith("HEAD-LINE")
    assert out.text.rstrip().endswith("AssertionError: boom")
    dropped = message_tokens(step[1]) - message_tokens(out)
    assert "tokens dropped" in out.text
    marker_count = int(out.text.split("[... ")[1].split(" tokens")[0].replace(",", ""))
    assert abs(marker_count - dropped) <= 20  # the marker's own length is the difference


def test_shorten_text_leaves_short_text_alone() -> None:
    assert shorten_text("short", 10, 0) == "short"
    long = "a" * 1000 + "b" * 1000
    clipped = shorten_text(long, 400, 123)
    assert clipped.startswith("a" * 200) and clipped.endswith("b" * 200) and "123 tokens" in clipped
