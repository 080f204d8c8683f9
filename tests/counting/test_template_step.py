"""A Jinja template's step skips what it can prove unchanged; every count stays exact.

The loop memo takes the message cache's word that a list's leading dicts are those of the
list it ran on last (``PieceCache.kept_in_loop``), and hands out a view of its counts
(``PerMessage``) that later steps must leave as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.counting.strategies import messages, texts
from tests.counting.test_counter import _apply, edits
from tests.counting.test_hf import _build_folder

from ctxbudget.counting import PerMessage, RequestCounter, count_request, template_count
from ctxbudget.counting.select import choose_scheme
from ctxbudget.counting.template_build import same_values
from ctxbudget.counting.template_count import PieceCache, TemplateScheme
from ctxbudget.counting.template_loop import LoopMemo, plan_loop
from ctxbudget.errors import InputError
from ctxbudget.messages.model import Message, Request, ToolCall, ToolSpec
from ctxbudget.tokens.registry import get_tokenizer

FOLDERS = ("llama3-cl100k", "qwen2.5", "smollm3-template", "hermes-2-pro-template")
LOOKUP = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"word": {"type": "string"}}},
)


def _user(text: str) -> Message:
    return Message(role="user", content=text)


def _reply(text: str) -> Message:
    return Message(role="assistant", content=text)


def _exact(
    counter: RequestCounter,
    name: str,
    requests: Iterator[Request] | list[Request],
    refused: bool = False,
) -> None:
    """Count each request in turn: each equals a full count, then and after every later step.
    ``refused``: a request the template refuses (Llama: one tool call per turn) is refused by
    the counter too."""
    kept = []
    for request in requests:
        try:
            expected = count_request(request, name)
        except InputError:
            if not refused:
                raise
            with pytest.raises(InputError):
                counter.count(request)
            continue
        got = counter.count(request)
        # Not ``got == expected``: that would copy a view's items before later steps run.
        assert replace(got, per_message=()) == replace(expected, per_message=())
        assert [got.per_message[i] for i in range(len(got.per_message))] == list(
            expected.per_message
        )
        kept.append((got, expected))
    for got, expected in kept:
        assert tuple(got.per_message) == tuple(expected.per_message)


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_memo_skipped_by_a_step_does_not_take_its_word(
    folder: str, hf_folder: Callable[[str], Path]
) -> None:
    """R1 runs the plain loop, R2 (with tools, another template) another memo, R3 extends R2
    without tools: the plain memo last ran on R1, whose second message R3 does not have."""
    name = f"hf:{hf_folder(folder)}"
    r1 = Request(messages=(_user("how are you"), _reply("very well, thank you")))
    r2 = Request(messages=(r1.messages[0], _reply("not so well today")), tools=(LOOKUP,))
    r3 = Request(messages=r2.messages).append(_user("why not?"))
    _exact(RequestCounter(name), name, [r1, r2, r3])


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_memo_run_in_between_on_another_list_is_not_told_it_is_unchanged(
    folder: str, hf_folder: Callable[[str], Path]
) -> None:
    """The step's own counter counts a side request between two appends, as a loop does."""
    name = f"hf:{hf_folder(folder)}"
    counter = RequestCounter(name)
    base = Request(system="Be brief.", messages=(_user("first"), _reply("one")))
    side = Request(system="Be brief.", messages=(_user("other"), _reply("two")))
    _exact(counter, name, [base, side, base.append(_user("second")), side.append(_user("x"))])


@pytest.mark.parametrize("folder", FOLDERS)
def test_counts_handed_out_keep_their_breakdown_across_drops_and_edits(
    folder: str, hf_folder: Callable[[str], Path]
) -> None:
    name = f"hf:{hf_folder(folder)}"

    def steps() -> Iterator[Request]:
        request = Request(messages=(_user("start"),))
        for i in range(6):
            request = request.append(_reply(f"reply {i}") if i % 2 == 0 else _user(f"ask {i}"))
            yield request
        yield (request := request.with_messages(request.messages[:3]))  # below the view
        yield (request := request.with_messages(request.messages[:2]))  # to its last
        longer = _reply("a reply made again, and longer than before")
        yield (request := request.with_messages((request.messages[0], longer)))
        summary = _user("Summary of the conversation so far, in a few words")
        yield (request := request.with_messages((summary, *request.messages[1:])))
        yield (request := request.append(_user("")))
        yield request.with_messages(request.messages[:1])

    _exact(RequestCounter(name), name, steps())


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_last_message_made_again_before_a_new_one(
    folder: str, hf_folder: Callable[[str], Path]
) -> None:
    """Neither end of the loop's list changes its object, the one before the last does; with
    a system prompt the loop may be given the list past it (Llama 3)."""
    name = f"hf:{hf_folder(folder)}"
    for system in (None, "", "Be brief."):
        first = Request(system=system, messages=(_user("hello"),))
        kept = first.append(_reply("hi"))
        again = kept.with_messages((*first.messages, _reply("hi, how can I help?"), _user("x")))
        _exact(RequestCounter(name), name, [first, kept, again, again.append(_reply("y"))])


def test_a_view_gives_the_last_message_its_joined_run_fix(tmp_path: Path) -> None:
    """No added token between the texts: the last one carries the joined run's fix, and the
    breakdown still adds up (a full count runs the same code, so it is no oracle here)."""
    plain = "{% for m in messages %}{{ m.content }}{% endfor %}"
    name = f"hf:{_build_folder(tmp_path / 'joined', plain)}"
    counter = RequestCounter(name)
    request = Request(messages=(_user("The qu"),))
    for text in ("ick brown", " fox", "ick"):
        request = request.append(_reply(text))
        got = counter.count(request)
        assert isinstance(got.per_message, PerMessage)
        assert sum(got.per_message) == got.messages == got.total
        joined = "".join(m.text for m in request.messages)
        alone = count_request(Request(messages=(_user(joined),)), name)
        assert got.total == alone.total


def test_an_append_step_hands_out_a_view(hf_folder: Callable[[str], Path]) -> None:
    """Llama 3 loops over the messages past the system prompt: the counts are the view's."""
    name = f"hf:{hf_folder('llama3-cl100k')}"
    counter = RequestCounter(name)
    request = Request(system="Be brief.", messages=(_user("hello"),))
    first = counter.count(request)
    second = counter.count(request.append(_reply("hi"), _user("more")))
    assert isinstance(first.per_message, PerMessage)
    assert isinstance(second.per_message, PerMessage)
    assert second == count_request(request.append(_reply("hi"), _user("more")), name)
    assert first == count_request(request, name)


def test_a_system_prompt_added_or_dropped_shifts_every_item(tmp_path: Path) -> None:
    """The head reads nothing of ``messages``: its render is reused and the loop is given the
    whole list, one item longer or shorter than the last one at the front."""
    loop = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    name = f"hf:{_build_folder(tmp_path / 'plain', loop)}"
    first = Request(messages=(_user("hello"), _reply("hi there")))
    kept = first.append(_user("more"))  # the first step that runs the loop alone
    system = Request(system="Be brief.", messages=kept.messages).append(_reply("sure"))
    plain = Request(messages=system.messages).append(_user("ok"))
    _exact(RequestCounter(name), name, [first, kept, system, plain, plain.append(_reply("k"))])


def test_a_loop_is_told_its_kept_items_only_when_it_ran_on_the_list_before(
    hf_folder: Callable[[str], Path],
) -> None:
    """The message cache vouches for the dicts a request kept only to a memo that ran on the
    version just before, on the list from the same start; the memo then renders the rest."""
    scheme = choose_scheme(f"hf:{hf_folder('llama3-cl100k')}")
    assert isinstance(scheme, TemplateScheme)
    cache = PieceCache(scheme)
    first = Request(messages=(_user("a"), _reply("b")))
    listed = cache.template_messages(first, 0)
    seen = (cache.version, 0)
    plan = plan_loop("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert plan is not None
    rendered: list[str] = []

    def measure(text: str, pieces: object) -> tuple[int, tuple[bool, bool]]:
        rendered.append(text)
        return len(text), (False, False)

    memo = LoopMemo(plan, measure)
    memo.run(listed, _echo, [])
    grown = first.append(_user("c"))
    listed = cache.template_messages(grown, 2)
    assert cache.kept_in_loop(seen, 0) == 2
    assert cache.kept_in_loop(seen, 1) == 0  # the loop's list starts elsewhere
    assert cache.kept_in_loop(None, 0) == 0  # unknown: a run that failed, or none yet
    rendered.clear()
    memo.run(listed, _echo, [], cache.kept_in_loop(seen, 0))
    assert rendered == ["[c]"] and memo.texts == ["[a]", "[b]", "[c]"]
    cache.template_messages(grown.append(_reply("d")), 3)  # a version the memo did not see
    assert cache.kept_in_loop(seen, 0) == 0


def _echo(message: dict[str, str], loop: object, messages: object) -> str:
    return f"[{message['content']}]"


def test_a_step_that_fails_outside_jinja_fails_as_a_fresh_count_does(
    hf_folder: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text the tokenizer refuses on a proven shape, built without Jinja: one line, the
    InputError a fresh count gives, not the tokenizer's own error (review). (A lone surrogate
    did it once; the tokenizer now counts one as U+FFFD, so a refusal is made here.)"""
    name = f"hf:{hf_folder('llama3-cl100k')}"
    tokenizer = get_tokenizer(name)
    real, real_one = tokenizer.count_special_many, tokenizer.count_special

    def refusing(texts: list[str]) -> list[int]:
        if any("refused" in t for t in texts):
            raise TypeError("the tokenizer refuses this text")
        return real(texts)

    def refusing_one(text: str) -> int:  # a step's one new piece
        return refusing([text])[0] if "refused" in text else real_one(text)

    monkeypatch.setattr(tokenizer, "count_special_many", refusing)
    monkeypatch.setattr(tokenizer, "count_special", refusing_one)
    counter = RequestCounter(name)
    request = Request(messages=(_user("hi"),))
    counter.count(request)
    bad = request.append(_reply("x refused y"))
    with pytest.raises(InputError, match="chat template failed: TypeError: the tokenizer"):
        count_request(bad, name)
    with pytest.raises(InputError, match="chat template failed: TypeError: the tokenizer"):
        counter.count(bad)
    assert counter.count(request.append(_reply("fine"))) == count_request(
        request.append(_reply("fine")), name
    )


def test_a_negative_zero_set_before_the_loop_is_rendered_again_as_zero(tmp_path: Path) -> None:
    """``-0.0 == 0.0`` but prints apart: a body reading such a value renders again when it
    turns (the memo compared the values with ``==``; review)."""
    template = (
        "{% set z = (messages|length - 2) * 0.0 %}{% for m in messages %}<|im_start|>"
        "{{ m.role }}\n{{ z }}{{ m.content }}<|im_end|>\n{% endfor %}"
    )
    name = f"hf:{_build_folder(tmp_path / 'zero', template)}"
    counter = RequestCounter(name)
    request = Request(messages=(_user("hi"),))
    assert counter.count(request) == count_request(request, name)  # -0.0
    grown = request.append(_reply("yo"), _user("again"))
    assert counter.count(grown) == count_request(grown, name)  # 0.0


# Folders whose loop texts read nothing after them (no tools); where the loop renders the
# system prompt too (SmolLM3, Hermes), an empty one included, its text is the head's and the
# step takes the general path.
APPENDABLE = [("llama3-cl100k", None), ("llama3-cl100k", ""), ("llama3-cl100k", "Be brief.")]
APPENDABLE += [("smollm3-template", None), ("hermes-2-pro-template", None)]


@pytest.mark.parametrize(("folder", "system"), APPENDABLE)
def test_a_usual_append_measures_the_new_text_alone(
    folder: str,
    system: str | None,
    hf_folder: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One plain message appended, the head as it was: the step does not render the template
    (the loop runs alone), tokenises one text, the new message's, and equals a fresh count
    (counted after the spies are gone: a fresh count shares the tokenizer)."""
    name = f"hf:{hf_folder(folder)}"
    counter = RequestCounter(name)
    first = Request(system=system, messages=(_user("hello"), _reply("hi there")))
    request = first.append(_user("more"))
    counter.count(first)
    counter.count(request)  # the loop runs alone from the second count on
    state = counter._state
    assert isinstance(state, PieceCache)
    scheme = state.scheme
    (memo,) = state.loops.values()
    rendered: list[object] = []
    encoded: list[str] = []
    real_render, real_one = TemplateScheme.render, scheme.tokenizer.count_special

    def render(*args: Any, **kwargs: Any) -> Any:
        rendered.append(args)
        return real_render(*args, **kwargs)

    def one(text: str) -> int:
        encoded.append(text)
        return real_one(text)

    monkeypatch.setattr(TemplateScheme, "render", render)
    monkeypatch.setattr(scheme.tokenizer, "count_special", one)
    counted = []
    for new in (_reply("sure, here it is"), _user("thanks 数据 🙂"), _reply("ok")):
        request = request.append(new)
        counted.append((request, counter.count(request)))
        assert rendered == []
        assert len(encoded) == len(counted) and new.text in encoded[-1]
        assert encoded[-1] in memo.texts[-1]  # the new message's own text
    monkeypatch.undo()
    for request, got in counted:
        assert got == count_request(request, name)


# Loops whose texts meet without an added token: between two messages, and the last one with
# the generation prompt; the append step must count both as the full count does.
JOINED = "{% for m in messages %}{{ m.content }}{% endfor %}"
TAIL = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}\nassistant:{% endif %}"
)


@pytest.fixture(scope="module")
def no_cut_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("no_cut_folders")
    return {
        name: f"hf:{_build_folder(root / name, template)}"
        for name, template in (("joined", JOINED), ("tail", TAIL))
    }


_plain = st.builds(_user, texts) | st.builds(_reply, texts)
one_by_one = st.one_of(  # plain turns three times in five: runs of append steps
    *[st.tuples(st.just("extend"), st.lists(_plain, min_size=1, max_size=1))] * 3,
    st.tuples(st.just("extend"), st.lists(messages(), min_size=1, max_size=1)),
    edits,
)


@pytest.mark.parametrize(
    "folder", [*dict.fromkeys(f for f, _ in APPENDABLE), "qwen2.5", "joined", "tail"]
)
@settings(max_examples=30, deadline=None)
@given(
    system=st.sampled_from(["", "Be brief."]), steps=st.lists(one_by_one, min_size=3, max_size=12)
)
def test_appending_one_message_at_a_time_equals_a_fresh_count(
    folder: str,
    system: str,
    steps: list[tuple[str, object]],
    hf_folder: Callable[[str], Path],
    no_cut_folders: dict[str, str],
) -> None:
    """Most steps append one message (``Request.append``: one new message), the
    others edit, drop or change the head: each count equals a fresh one, then and at the end."""
    name = no_cut_folders.get(folder) or f"hf:{hf_folder(folder)}"
    request = Request(system=system, messages=(_user("start"),))
    requests = [request]
    for step in steps:
        request = _apply(request, step)
        requests.append(request)
    _exact(RequestCounter(name), name, requests, refused=True)


def test_a_step_in_brief_that_fails_fails_as_a_fresh_count_does(
    hf_folder: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tokenizer refusing the new message's text on an append step: one line, the
    fresh count's InputError, and the next step counts as if the failed one never was."""
    name = f"hf:{hf_folder('llama3-cl100k')}"
    tokenizer = get_tokenizer(name)
    real_one = tokenizer.count_special

    def refusing_one(text: str) -> int:
        if "refused" in text:
            raise TypeError("the tokenizer refuses this text")
        return real_one(text)

    counter = RequestCounter(name)
    request = Request(system="Be brief.", messages=(_user("hi"),))
    for new in (_reply("hello"), _user("more"), _reply("ok")):  # appends, the loop run alone
        request = request.append(new)
        counter.count(request)
    monkeypatch.setattr(tokenizer, "count_special", refusing_one)
    with pytest.raises(InputError, match="chat template failed: TypeError: the tokenizer"):
        counter.count(request.append(_user("x refused y")))
    monkeypatch.undo()
    fine = request.append(_user("fine"))
    assert counter.count(fine) == count_request(fine, name)
    again = fine.append(_reply("and again"))
    assert counter.count(again) == count_request(again, name)


def _call(arguments: str) -> Message:
    return Message(
        role="assistant", content="", tool_calls=(ToolCall(id="c1", name="f", arguments=arguments),)
    )


@pytest.mark.parametrize(("was", "now"), [("true", "1"), ("1", "1.0"), ("false", "0")])
def test_a_tool_call_edited_to_arguments_equal_once_parsed_is_rendered_again(
    was: str, now: str, hf_folder: Callable[[str], Path]
) -> None:
    """``{"a": true}`` retried as ``{"a": 1}``: the message dicts compare equal once parsed,
    Llama 3's loop texts (``arguments | tojson``) differ (review)."""
    name = f"hf:{hf_folder('llama3-cl100k')}"
    done = Message(role="tool", content="done", tool_call_id="c1")
    first = Request(messages=(_user("hi"), _call(f'{{"a": {was}}}'), done))
    retried = first.with_messages((_user("hi"), _call(f'{{"a": {now}}}'), done))
    _exact(RequestCounter(name), name, [first, retried, retried.append(_reply("ok"))])


def test_a_request_whose_dicts_fail_midway_leaves_the_counter_as_it_was(
    hf_folder: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message the template input refuses, after others that changed: the next requests
    count as if the failed one never was (the cache's dicts were half rewritten; review)."""
    name = f"hf:{hf_folder('llama3-cl100k')}"
    real = template_count.message_dict

    def refusing(message: Message) -> dict[str, Any]:
        if message.text == "refused":
            raise TypeError("this message is refused")
        return real(message)

    monkeypatch.setattr(template_count, "message_dict", refusing)
    counter = RequestCounter(name)
    base = Request(system="Be brief.", messages=(_user("hello"), _reply("first"), _user("why")))
    for request in (base, base.append(_reply("because"))):
        counter.count(request)
    other = (_reply("another reply, longer than the first"), _user("and a longer question"))
    failing = base.with_messages((_user("hello"), *other, _reply("refused")))
    with pytest.raises(TypeError, match="refused"):
        counter.count(failing)
    later = base.append(_reply("because")).append(_user("and?"))
    _exact(counter, name, [base.append(_reply("so")), later, later.append(_reply("fine"))])


def test_values_from_before_the_loop_equal_but_printed_apart_are_not_the_same() -> None:
    """A list or dict set before the loop may hold ``True`` where it held ``1``: equal, and
    printed apart by the body (as ``-0.0`` and ``0.0``; review)."""
    assert same_values([[1, "a"], {"k": None}, 2.5], [[1, "a"], {"k": None}, 2.5])
    for old, new in (([True], [1]), ({"a": 1}, {"a": 1.0}), (-0.0, 0.0), ((0,), (False,))):
        assert old == new
        assert not same_values([old], [new])
