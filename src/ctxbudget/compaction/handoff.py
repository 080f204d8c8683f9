"""The structured handoff summary: its template, and the facts our code fills in itself.

Exact error lines and the files read/modified come from the tool calls and outputs, not from
the summarizing model's memory; ``finish_summary`` puts back whatever the model left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ctxbudget.messages.model import Message

__all__ = [
    "FILE_TOOLS",
    "HANDOFF_SECTIONS",
    "HANDOFF_TEMPLATE",
    "SUMMARY_HEADER",
    "FileActivity",
    "FileTool",
    "error_lines",
    "file_activity",
    "finish_summary",
    "summary_facts",
]

SUMMARY_HEADER = "Summary of the conversation so far (ctxbudget handoff)"

# Section order follows the handoff templates of Pi (structured summary + file lists) and
# Codex (handoff summary); "Errors, verbatim" is ours: the seed's layered run wrote the exact
# error in 0 of 17 summaries.
HANDOFF_SECTIONS: tuple[str, ...] = (
    "Goal",
    "Constraints and preferences",
    "Progress",
    "Key decisions",
    "Errors",
    "Files read",
    "Files modified",
    "Commands run",
    "Next steps",
)
_HARNESS_SECTIONS = ("Files read", "Files modified", "Commands run")

HANDOFF_TEMPLATE = """\
## Goal
What the user asked for, in their words where possible.

## Constraints and preferences
Requirements, limits and preferences the user stated.

## Progress
### Done
### In progress
### Blocked

## Key decisions
Each decision and why it was taken.

## Errors
Every error still relevant, quoted exactly, character for character, one per line.

## Files read
(filled in by the harness from the tool calls; leave empty)

## Files modified
(filled in by the harness from the tool calls; leave empty)

## Commands run
(filled in by the harness from the tool calls; leave empty)

## Next steps
The concrete next actions, in order.
"""

Kind = Literal["read", "modified", "command", "editor", "patch"]


@dataclass(frozen=True, slots=True)
class FileTool:
    """How one tool's calls count: what it does to files and which argument names the file."""

    kind: Kind
    keys: tuple[str, ...]


_PATH_KEYS = ("path", "file", "file_path", "filename", "target_file")
_CMD_KEYS = ("command", "cmd")

# Tool name -> what its calls mean. Names cover our MockProvider and common harnesses
# (Claude Code Read/Write/Edit, Codex apply_patch/shell, Anthropic str_replace_editor).
FILE_TOOLS: Mapping[str, FileTool] = {
    **{n: FileTool("read", _PATH_KEYS) for n in ("read_file", "read", "view", "open_file", "cat")},
    **{
        n: FileTool("modified", _PATH_KEYS)
        for n in ("write_file", "write", "create_file", "edit_file", "edit", "multi_edit")
    },
    **{n: FileTool("patch", ("patch", "input")) for n in ("apply_patch", "patch")},
    **{
        n: FileTool("command", _CMD_KEYS)
        for n in ("run", "bash", "shell", "exec", "exec_command", "run_command", "terminal")
    },
    # str_replace_editor: command "view" reads, every other command writes.
    "str_replace_editor": FileTool("editor", _PATH_KEYS),
    "str_replace_based_edit_tool": FileTool("editor", _PATH_KEYS),
}

_PATCH_FILE = re.compile(r"^(?:\*\*\* (?:Add|Update|Delete) File: |\+\+\+ b/)(.+?)\s*$", re.M)
# Lines that read as errors in tool output: Python exceptions, pytest FAILED, compiler
# "error:" / rustc "error[E..]", and tracebacks.
_ERROR_LINE = re.compile(
    r"\b\w*(?:Error|Exception)\b|Traceback \(most recent call last\)|\bFAILED\b"
    r"|\berror(?::|\[)|\bERROR\b"
)
MAX_ERROR_LINES = 12
"""Most recent distinct error lines kept; a test run can print hundreds."""
MAX_ERROR_CHARS = 600
"""Longer error lines are cut (rare: minified code, giant asserts)."""
MAX_LISTED = 40
"""File and command lists keep their most recent entries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FileActivity:
    """Files read and modified and commands run, in first-seen order, without repeats."""

    read: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()

    def merged(self, other: FileActivity) -> FileActivity:
        """This activity followed by ``other``'s, deduplicated, capped at ``MAX_LISTED``."""
        return FileActivity(
            read=_unique([*self.read, *other.read])[-MAX_LISTED:],
            modified=_unique([*self.modified, *other.modified])[-MAX_LISTED:],
            commands=_unique([*self.commands, *other.commands])[-MAX_LISTED:],
        )


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))


def _argument(args: object, keys: Sequence[str]) -> str | None:
    if isinstance(args, str):
        return args
    if isinstance(args, Mapping):
        for key in keys:
            value = args.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def file_activity(messages: Iterable[Message]) -> FileActivity:
    """Files and commands named by the assistants' tool calls, per ``FILE_TOOLS``."""
    read: list[str] = []
    modified: list[str] = []
    commands: list[str] = []
    for m in messages:
        for call in m.tool_calls:
            tool = FILE_TOOLS.get(call.name)
            if tool is None:
                continue
            args = call.parsed_arguments()
            value = _argument(args, tool.keys)
            if value is None:
                continue
            if tool.kind == "patch":
                modified.extend(_PATCH_FILE.findall(value))
            elif tool.kind == "command":
                commands.append(value.splitlines()[0][:200] if value else value)
            elif tool.kind == "editor":
                is_view = isinstance(args, Mapping) and args.get("command") == "view"
                (read if is_view else modified).append(_argument(args, _PATH_KEYS) or "")
            elif not isinstance(args, str):
                (read if tool.kind == "read" else modified).append(value)
    return FileActivity(read=_unique(read), modified=_unique(modified), commands=_unique(commands))


def _error_lines_in(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = line.rstrip()
        if line and _ERROR_LINE.search(line):
            out.append(line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS] + "…")
    return out


def error_lines(messages: Iterable[Message]) -> tuple[str, ...]:
    """The most recent distinct error lines in tool outputs, exactly as printed."""
    found: list[str] = []
    for m in messages:
        if m.role == "tool":
            found.extend(_error_lines_in(m.text))
    return _unique(reversed(found))[:MAX_ERROR_LINES][::-1]


def _sections(text: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """Split Markdown at ``## `` headings: (preamble, [(heading, body lines)])."""
    preamble: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("## "):
            sections.append((line[3:].strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            preamble.append(line)
    return "\n".join(preamble).strip(), sections


def _bullets(lines: Sequence[str]) -> list[str]:
    return [ln[2:].strip() for ln in lines if ln.startswith("- ") and ln[2:].strip()]


def summary_facts(summary: str) -> tuple[tuple[str, ...], FileActivity]:
    """Error lines and file lists a previous handoff summary carried, to carry them forward."""
    _, sections = _sections(summary)
    body = {name: lines for name, lines in sections}
    errors = [e.strip("`") for e in _bullets(body.get("Errors", [])) if _ERROR_LINE.search(e)]
    files = FileActivity(
        read=_unique(_bullets(body.get("Files read", []))),
        modified=_unique(_bullets(body.get("Files modified", []))),
        commands=_unique(_bullets(body.get("Commands run", []))),
    )
    return _unique(errors), files


def _listing(items: Sequence[str]) -> list[str]:
    return [f"- {item}" for item in items] or ["- none"]


def finish_summary(text: str, *, errors: Sequence[str], files: FileActivity) -> str:
    """The model's summary with our facts enforced, under the handoff header.

    Missing error lines are appended verbatim to the Errors section; the Files read / Files
    modified / Commands run sections are replaced by the lists derived from the tool calls.
    """
    text = text.strip()
    if text.startswith(SUMMARY_HEADER):
        text = text[len(SUMMARY_HEADER) :].strip()
    preamble, sections = _sections(text)
    sections = [(name, body) for name, body in sections if name not in _HARNESS_SECTIONS]
    missing = [e for e in errors if e not in text]
    names = [name for name, _ in sections]
    if "Errors" not in names:
        sections.append(("Errors", []))
    for name, body in sections:
        if name == "Errors":
            while body and not body[-1].strip():
                body.pop()
            body.extend(f"- {e}" for e in missing)
            if not body:
                body.append("- none")
    derived = {
        "Files read": files.read,
        "Files modified": files.modified,
        "Commands run": files.commands,
    }
    at = next(i for i, (name, _) in enumerate(sections) if name == "Errors") + 1
    sections[at:at] = [(name, _listing(items)) for name, items in derived.items()]
    parts = [SUMMARY_HEADER]
    if preamble:
        parts.append(preamble)
    for name, body in sections:
        parts.append("\n".join([f"## {name}", *body]).rstrip())
    return "\n\n".join(parts) + "\n"
