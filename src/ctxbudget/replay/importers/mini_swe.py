"""mini-swe-agent ``.traj.json``: one call per assistant message with litellm's ``usage``.

litellm reports OpenAI chat usage (DeepSeek's cache fields included), read by `usage_from_any`.

A trajectory is one JSON document, not JSON lines, so it is parsed whole; files above
`MAX_TRAJECTORY_BYTES` (64 MiB, the longest session line read) are refused with a clear error
instead of exhausting memory (real trajectories are well under 10 MB: the 61-call fixture is
328 KB).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ctxbudget.budget.usage import usage_from_any
from ctxbudget.errors import TraceFormatError
from ctxbudget.replay.importers._builder import CallBuilder, block_text, read_usage
from ctxbudget.replay.importers._lines import (
    MAX_DEPTH,
    MAX_LINE_BYTES,
    LineReader,
    Progress,
    Record,
    as_dict,
    as_list,
    too_deep,
)
from ctxbudget.replay.trace import Call

MAX_TRAJECTORY_BYTES = MAX_LINE_BYTES
_DEEP = object()  # stands for a document too deeply nested for json.loads


def sniff(record: Record) -> bool:
    """True for a trajectory document (or a one-line copy of one)."""
    return isinstance(record.get("messages"), list) and (
        "trajectory_format" in record or "info" in record
    )


def load(path: Path, size: int, progress: Progress | None) -> Record:
    """Parse the whole document, within the size limit."""
    if size > MAX_TRAJECTORY_BYTES:
        raise _too_big(path, size)
    with path.open("rb") as f:
        data = f.read(MAX_TRAJECTORY_BYTES + 1)  # the file may have grown since its stat
    if len(data) > MAX_TRAJECTORY_BYTES:
        raise _too_big(path, len(data))
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise TraceFormatError(f"{path}: not a valid JSON trajectory ({e})") from None
    except RecursionError:
        document = _DEEP
    if document is _DEEP or too_deep(document, MAX_DEPTH + 2):  # + the document and its list
        raise TraceFormatError(
            f"{path}: JSON nested deeper than {MAX_DEPTH} levels; not a mini-swe-agent trajectory"
        )
    if progress is not None:
        progress(size, size)
    if not isinstance(document, dict) or not sniff(document):
        raise TraceFormatError(f"{path}: not a mini-swe-agent trajectory (no 'messages' list)")
    return document


def _too_big(path: Path, size: int) -> TraceFormatError:
    return TraceFormatError(
        f"{path}: a trajectory of {size / 2**20:.0f} MiB or more; .traj.json files are parsed "
        f"whole and the limit is {MAX_TRAJECTORY_BYTES // 2**20} MiB"
    )


def _usage(message: Record) -> Record:
    extra = as_dict(message.get("extra"))
    response = as_dict(extra.get("response"))
    return (
        as_dict(response.get("usage"))
        or as_dict(extra.get("usage"))
        or as_dict(message.get("usage"))
    )


def read(document: Record, builder: CallBuilder, skips: LineReader) -> Iterator[Call]:
    """Calls of a trajectory, in order; a usage the reader rejects skips its message (counted
    and named in ``skips``)."""
    builder.reasoning = "dropped"  # litellm chat messages carry no reasoning back
    config = as_dict(as_dict(document.get("info")).get("config"))
    model_name = as_dict(config.get("model")).get("model_name")
    if isinstance(model_name, str):
        builder.model = model_name.rsplit("/", 1)[-1]
    for n, message in enumerate(as_dict(m) for m in as_list(document.get("messages"))):
        role = str(message.get("role", ""))
        reported = _usage(message)
        if role == "assistant" and reported:
            usage = read_usage(usage_from_any, reported, skips, f"messages[{n}]")
            if usage is None:
                continue
            response = as_dict(as_dict(message.get("extra")).get("response"))
            yield builder.call(
                usage=usage,
                reply=block_text(message.get("content"))
                + block_text(message.get("tool_calls") or ""),
                model=str(response.get("model") or "") or None,
            )
        elif role in ("system", "user", "tool"):
            builder.add(role, block_text(message.get("content")), task=role == "user")
