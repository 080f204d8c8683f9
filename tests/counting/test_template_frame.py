"""A template's head and tail are reused across steps only when what they read is unchanged:
each step's count equals a fresh count, and the render is skipped exactly where it may be."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.counting.test_hf import _build_folder

import ctxbudget.counting.template_count as template_count
from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.sandbox import Limits
from ctxbudget.counting.template_frame import Frame, Observed, Reads, suffix_start
from ctxbudget.counting.template_loop import plan_loop
from ctxbudget.errors import InputError
from ctxbudget.messages.model import Message, Request

LOOP = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
GENERATION = "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
FIRST = (
    "{% if messages[0].role == 'system' %}<|im_start|>system {{ messages[0].content }}<|im_end|>"
    "{% set messages = messages[1:] %}{% endif %}<|im_start|>n={{ messages | length > 0 }}"
    "<|im_end|>" + LOOP + GENERATION
)
TEMPLATES = {
    # reads messages[0] and the truth of a length: reused while neither changes
    "first": (FIRST, True),
    # the tail reads the last message: every step renders again
    "tail": (LOOP + "{% if messages[-1].role == 'user' %}<|im_start|>a\n{% endif %}", False),
    # the head reads every message (a filter iterates them)
    "iterates": (
        "<|im_start|>{{ messages | selectattr('role', 'equalto', 'user') | list | length }}"
        "<|im_end|>" + LOOP + GENERATION,
        False,
    ),
    # the tail changes a namespace the body reads: reusing it would show the body 'b'
    "namespace": (
        "{% set ns = namespace(x='a') %}{% for m in messages %}<|im_start|>{{ ns.x }}"
        "{{ m.content }}<|im_end|>{% endfor %}{% set ns.x = 'bbbbbbbb' %}" + GENERATION,
        False,
    ),
    # the length itself is printed: it changes every step
    "length": ("<|im_start|>{{ messages | length }}<|im_end|>" + LOOP + GENERATION, False),
    # the loop looks at its neighbours through the loop object (Hermes-2-Pro's tool_use)
    "neighbours": (
        "{% for m in messages %}{% if loop.previtem and loop.previtem.role == m.role %}"
        "<|im_start|>again<|im_end|>{% endif %}<|im_start|>{{ m.content }}"
        "{% if loop.nextitem %}<|im_end|>{% endif %}{% endfor %}",
        True,
    ),
    # the system prompt is the head's; its loop text is empty (SmolLM3): the head, which ends
    # without an added token, meets the first turn's <|im_start|>
    "empty": (
        "{% if messages[0].role == 'system' %}S {{ messages[0].content }}\n{% endif %}"
        "{% for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.content }}"
        "<|im_end|>{% endif %}{% endfor %}",
        True,
    ),
    # ... also under another name
    "alias": (
        "{% set rest = messages[1:] %}<|im_start|>{{ rest | length }}<|im_end|>" + LOOP,
        False,
    ),
}


@functools.cache
def _folder(root: Path, name: str) -> Path:
    return _build_folder(root / name, TEMPLATES[name][0])


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("frames")


def _steps(system: str) -> Iterator[Request]:
    messages: tuple[Message, ...] = ()
    for i in range(6):
        role = "user" if i % 4 in (0, 1) else "assistant"  # two turns of each in a row
        messages = (*messages, Message(role=role, content=f"turn {i} The quick brown fox"))
        yield Request(system=system, messages=messages)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a TemplateScheme renders, appended per count."""
    calls = [0]
    original = template_count.TemplateScheme.render

    def counted(self: template_count.TemplateScheme, *args: object, **kwargs: object) -> str:
        calls[0] += 1
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(template_count.TemplateScheme, "render", counted)
    return calls


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@pytest.mark.parametrize("system", ["", "Be brief."])
def test_each_step_equals_a_fresh_count(
    name: str, system: str, root: Path, renders: list[int]
) -> None:
    counter = f"hf:{_folder(root, name)}"
    stepped = RequestCounter(counter)
    per_step = []
    for request in _steps(system):
        before = renders[0]
        got = stepped.count(request)
        per_step.append(renders[0] - before)
        assert got == count_request(request, counter)
        assert sum(got.per_message) == got.messages and got.total == got.system + got.messages
    reused = TEMPLATES[name][1]
    # "first" reads messages[0] (the same dict each step: the system prompt or the first
    # turn) and compares a length with 0, true from the first step on.
    assert per_step == [1] + ([0] * 5 if reused else [1] * 5)


def test_a_new_date_renders_the_head_again(
    root: Path, renders: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    dates = iter(["1 Jan"] * 4 + ["12 December"] * 8)
    clock = {"now": "1 Jan"}

    def fake_now(fmt: str) -> str:
        clock["now"] = next(dates, clock["now"])
        return clock["now"]

    monkeypatch.setattr(template_count, "strftime_now", fake_now)
    head = "<|im_start|>{{ strftime_now('%d %b') }}<|im_end|>"
    dated = _build_folder(root / "dated", head + LOOP)
    stepped = RequestCounter(f"hf:{dated}")
    totals = []
    for request in _steps("Be brief."):
        totals.append(stepped.count(request).total)
        fresh = RequestCounter(f"hf:{dated}").count(request).total
        assert totals[-1] == fresh
    assert renders[0] > 6  # the first count and every count after the date moved rendered


def test_a_reused_head_still_runs_the_loop_within_the_deadline(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = (
        "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% if m.content == 'slow' %}"
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        "{% endif %}{% endfor %}"
    )
    monkeypatch.setattr(template_count, "Limits", functools.partial(Limits, seconds=0.3))
    stepped = RequestCounter(f"hf:{_build_folder(root / 'slow', slow)}")
    first = (Message(role="user", content="hi"),)
    stepped.count(Request(messages=first))
    with pytest.raises(InputError, match="deadline") as info:
        stepped.count(Request(messages=(*first, Message(role="assistant", content="slow"))))
    assert "\n" not in str(info.value)
    assert stepped.count(Request(messages=first)).total > 0  # still usable


def test_length_cuts_follow_every_use_of_a_length() -> None:
    assert plan_loop(FIRST).length_cuts == {0, 1}  # type: ignore[union-attr]
    assert plan_loop(TEMPLATES["length"][0]).length_cuts is None  # type: ignore[union-attr]
    compared = "{% if messages|length == 3 or 5 < messages|count %}x{% endif %}" + LOOP
    assert plan_loop(compared).length_cuts == {0, 1, 3, 4, 5, 6}  # type: ignore[union-attr]


def test_observed_records_reads_by_path() -> None:
    a, b, c = {"role": "system"}, {"role": "user"}, {"role": "assistant"}
    reads = Reads(3)
    seen = Observed([a, b, c], reads)
    assert seen[0] is a and len(seen[1:]) == 2 and seen[1:][-1] is c
    with pytest.raises(IndexError):
        seen[5]
    assert not reads.whole
    assert [position for _, _, position in reads.items] == [0, 2, None]
    frame = _frame(reads)
    assert frame.reusable(3, 3, None, str)  # every item kept
    assert not frame.reusable(3, 2, None, str)  # another last dict
    assert not frame.reusable(4, 4, None, str)  # messages[1:] longer
    assert not frame.reusable(3, 3, [], str)  # other tools
    assert suffix_start(4, frame.view) == 1  # its loop is given messages[1:]
    assert suffix_start(4, (slice(1, -1),)) is None  # not a suffix: no memoised loop


@pytest.mark.parametrize(
    "read",
    [
        list,
        sorted,
        reversed,
        str,
        repr,
        lambda s: s == [],
        lambda s: s < [],
        lambda s: {"role": "user"} in s,
        lambda s: s + [0],  # noqa: RUF005
        lambda s: [0] + s,  # noqa: RUF005
        lambda s: s * 2,
        lambda s: s.count(0),
        lambda s: s.copy(),
        lambda s: s.index({"role": "user"}),
    ],
)
def test_observed_reads_of_the_whole_list(read: Callable[[Observed], object]) -> None:
    reads = Reads(1)
    read(Observed([{"role": "user"}], reads))
    assert reads.whole


def _frame(reads: Reads) -> Frame:
    return Frame(
        before="",
        after="",
        reads=reads,
        tools=None,
        view=(slice(1, None),),
        body=None,
        outer=(),
        before_tokens=0,
        after_tokens=0,
        before_cut=False,
        after_cut=False,
        length_cuts=None,
    )


def test_strftime_now_is_remade_each_second(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as real
    from types import SimpleNamespace

    import ctxbudget.counting.hf as hf

    clock = {"t": 1_000.2, "made": 0}

    class Fake(real.datetime):
        @classmethod
        def now(cls, tz: object = None) -> Fake:  # type: ignore[override]
            clock["made"] += 1
            return cls.fromtimestamp(clock["t"], real.UTC)

    monkeypatch.setattr(hf, "datetime", Fake)
    monkeypatch.setattr(hf, "time", SimpleNamespace(time=lambda: clock["t"]))
    hf._CLOCK.clear()
    first = hf.strftime_now("%H:%M:%S")
    clock["t"] = 1_000.9
    assert hf.strftime_now("%H:%M:%S") == first and clock["made"] == 1  # the same second
    hf.strftime_now("%S.%f")
    hf.strftime_now("%S.%f")
    assert clock["made"] == 3  # microseconds are finer than a second: made each time
    clock["t"] = 1_001.0
    assert hf.strftime_now("%H:%M:%S") != first  # the next second: made again
    hf._CLOCK.clear()


def test_texts_that_meet_without_a_token_are_counted_as_one(root: Path) -> None:
    """A loop with no added token between messages: the texts are counted joined (as one
    message holding both), and a run whose text changed is counted again, not taken from the
    step before."""
    folder = _build_folder(root / "plain", "{% for m in messages %}{{ m.content }}{% endfor %}")
    counter = f"hf:{folder}"
    stepped = RequestCounter(counter)
    first = Message(role="user", content="The qu")
    for second in ("ick brown", " fox", "ick", "The quick", "ick brown fox"):
        request = Request(messages=(first, Message(role="assistant", content=second)))
        joined = Request(messages=(Message(role="user", content=first.text + second),))
        got = stepped.count(request)
        assert got == count_request(request, counter)
        assert got.total == count_request(joined, counter).total
