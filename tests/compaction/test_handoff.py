"""The handoff template: facts from tool calls, verbatim errors, update path, shrink in steps."""

from __future__ import annotations

import pytest
from tests.compaction.fakes import asks, call, coding_session, result, user

from ctxbudget.compaction.handoff import (
    HANDOFF_SECTIONS,
    SUMMARY_HEADER,
    FileActivity,
    error_lines,
    file_activity,
    finish_summary,
    summary_facts,
)
from ctxbudget.compaction.summarizer import (
    CLIP_STEPS,
    SUMMARIZER_SYSTEM,
    ProviderSummarizer,
    fit_summarizer_request,
    summarizer_request,
)
from ctxbudget.errors import CompactionError
from ctxbudget.messages.model import Message, Request, ToolCall

PATCH = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n*** Add File: src/b.py\n+z\n"


@pytest.mark.parametrize(
    ("tool_call", "read", "modified", "commands"),
    [
        (call("1", "read_file", path="src/x.py"), ("src/x.py",), (), ()),
        (call("1", "Read", file_path="a"), (), (), ()),  # unknown name: not guessed
        (call("1", "read", file_path="a.md"), ("a.md",), (), ()),
        (call("1", "write_file", file="out.txt"), (), ("out.txt",), ()),
        (call("1", "edit_file", path="m.py", old="a"), (), ("m.py",), ()),
        (call("1", "apply_patch", patch=PATCH), (), ("src/a.py", "src/b.py"), ()),
        (call("1", "run", command="pytest -q tests\nsecond line"), (), (), ("pytest -q tests",)),
        (call("1", "str_replace_editor", command="view", path="v.py"), ("v.py",), (), ()),
        (call("1", "str_replace_editor", command="create", path="n.py"), (), ("n.py",), ()),
        (ToolCall(id="1", name="read_file", arguments="not json"), (), (), ()),
    ],
)
def test_file_activity_table(
    tool_call: ToolCall, read: tuple[str, ...], modified: tuple[str, ...], commands: tuple[str, ...]
) -> None:
    got = file_activity([asks(tool_call)])
    assert (got.read, got.modified, got.commands) == (read, modified, commands)


def test_error_lines_are_verbatim_recent_and_distinct() -> None:
    out = (
        "collected 3 items\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 3\n'
        "AssertionError: assert '2024-01-01' == '2024-01-02'\n"
        "src/a.c:3:5: error: expected ';'\n"
        "3 passed, 0 errors\n"
        "FAILED tests/test_x.py::test_y - KeyError: 'tz'\n"
    )
    msgs = [result("1", out), result("2", out), user("Error in my message is not a tool output")]
    lines = error_lines(msgs)
    assert lines == (
        "Traceback (most recent call last):",
        "AssertionError: assert '2024-01-01' == '2024-01-02'",
        "src/a.c:3:5: error: expected ';'",
        "FAILED tests/test_x.py::test_y - KeyError: 'tz'",
    )


def test_finish_summary_adds_missing_errors_and_derived_files() -> None:
    model = (
        "## Goal\nFix dates.\n\n## Errors\n- KeyError: 'tz'\n\n"
        "## Files read\n- invented.py\n\n## Next steps\n- rerun"
    )
    errors = ("KeyError: 'tz'", "AssertionError: assert 1 == 2")
    files = FileActivity(read=("src/real.py",), modified=("src/fix.py",), commands=("pytest",))
    text = finish_summary(model, errors=errors, files=files)
    assert text.startswith(SUMMARY_HEADER)
    errors_section = text.split("## Errors")[1].split("\n## ")[0]
    assert "AssertionError: assert 1 == 2" in errors_section
    assert errors_section.count("KeyError: 'tz'") == 1  # not duplicated
    assert "invented.py" not in text  # our lists replace the model's
    assert "- src/real.py" in text.split("## Files read")[1].split("\n## ")[0]
    assert "- src/fix.py" in text.split("## Files modified")[1].split("\n## ")[0]
    assert text.index("## Files read") < text.index("## Next steps")
    # a summary written from our own output carries the same facts forward
    got_errors, got_files = summary_facts(text)
    assert set(errors) <= set(got_errors)
    assert got_files == files


def test_finish_summary_without_headings_gets_our_sections() -> None:
    text = finish_summary("plain extractive text", errors=("ValueError: x",), files=FileActivity())
    assert "plain extractive text" in text
    assert "## Errors\n- ValueError: x" in text and "## Files read\n- none" in text


def test_summarizer_system_prompt_carries_every_section() -> None:
    for name in HANDOFF_SECTIONS:
        assert f"## {name}" in SUMMARIZER_SYSTEM


def count4(request: Request) -> int:
    return (len(request.system or "") + sum(len(m.text) for m in request.messages)) // 4


def test_shrink_in_steps_clips_harder_before_dropping() -> None:
    folded = coding_session(10, output_chars=6000)[1:]
    args = {"errors": (), "files": FileActivity(), "max_output_tokens": 200}
    full = summarizer_request(None, folded, **args)  # type: ignore[arg-type]
    mid = summarizer_request(None, folded, clip_chars=CLIP_STEPS[1], **args)  # type: ignore[arg-type]
    limit = count4(mid) + 200 + 5  # fits only once clipped to the second step
    assert count4(full) + 200 > limit
    got = fit_summarizer_request(None, folded, limit=limit, count=count4, **args)  # type: ignore[arg-type]
    assert got == mid
    # smaller still: the oldest steps go, the newest stay
    hardest = summarizer_request(None, folded, clip_chars=CLIP_STEPS[-1], **args)  # type: ignore[arg-type]
    small = fit_summarizer_request(
        None,
        folded,
        limit=count4(hardest) // 2 + 200,
        count=count4,
        **args,  # type: ignore[arg-type]
    )
    text = small.messages[0].text
    assert "src/mod0.py" not in text and "src/mod9.py" in text
    assert count4(small) + 200 <= count4(hardest) // 2 + 200


def test_shrink_keeps_errors_and_fails_clearly_when_nothing_fits() -> None:
    folded = coding_session(6, output_chars=3000)[1:]
    errors = error_lines(folded)
    args = {"errors": errors, "files": file_activity(folded), "max_output_tokens": 100}
    hardest = summarizer_request(None, folded[-1:], clip_chars=CLIP_STEPS[-1], **args)  # type: ignore[arg-type]
    got = fit_summarizer_request(None, folded, limit=count4(hardest) + 100, count=count4, **args)  # type: ignore[arg-type]
    for line in errors:
        assert line in got.messages[0].text
    with pytest.raises(CompactionError) as info:
        fit_summarizer_request("p" * 40_000, folded, limit=2000, count=count4, **args)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_provider_summarizer_adapts_any_provider() -> None:
    class Reply:
        def __init__(self, text: str) -> None:
            self.message = Message(role="assistant", content=text)

    class Provider:
        window = 4096

        def __init__(self) -> None:
            self.seen: list[Request] = []

        def complete(self, request: Request) -> Reply:
            self.seen.append(request)
            return Reply("## Goal\nx")

    provider = Provider()
    adapter = ProviderSummarizer(provider)
    request = summarizer_request(
        None, [user("hi")], errors=(), files=FileActivity(), max_output_tokens=50
    )
    assert adapter.summarize(request) == "## Goal\nx"
    assert adapter.window == 4096 and provider.seen == [request]
