"""ctxbudget's own session archive (JSONL): message, usage and compaction records.

Read tolerantly: a message may be nested under ``"message"`` or written flat; usage may be a
record of its own (``{"type": "usage", ...}``) or sit on an assistant message. Usage fields are
those of `ctxbudget.messages.usage.Usage`, read by the archive's own `usage_from_record`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ctxbudget.compaction.records import usage_from_record
from ctxbudget.replay.importers._builder import CallBuilder, block_text, read_usage, read_window
from ctxbudget.replay.importers._lines import LineReader, Record, as_dict, as_list
from ctxbudget.replay.trace import Call

# A tuple, not a set: a record's "type" may be any JSON value, a list or object included.
_TYPES = ("usage", "message", "compaction", "header", "session")


def sniff(record: Record) -> bool:
    """True for a line of a ctxbudget archive (Pi's lines carry ``parentId``; ours do not)."""
    return (
        record.get("type") in _TYPES
        and "parentId" not in record
        and "sessionId" not in record
        and (
            "usage" in record
            or "message" in record
            or "role" in record
            or "input_tokens" in record
            or record.get("type") in ("compaction", "header", "session")
        )
    )


class _Calls:
    """Turns usage records into calls; a usage the strict reader rejects skips its line."""

    def __init__(self, reader: LineReader, builder: CallBuilder) -> None:
        self.reader = reader
        self.builder = builder

    def call(self, record: Record, lineno: int, reply: str | None, model: object) -> Call | None:
        usage = read_usage(usage_from_record, record, self.reader, f"line {lineno}")
        if usage is None or usage.is_zero:
            return None
        return self.builder.call(usage=usage, reply=reply, model=str(model) if model else None)


def _text(message: Record) -> str:
    calls = as_list(message.get("tool_calls"))
    return block_text(message.get("content")) + "".join(block_text(c) for c in calls)


def read(reader: LineReader, builder: CallBuilder) -> Iterator[Call]:
    """Calls of an archive, in order."""
    builder.reasoning = "dropped"  # the agent does not send reasoning back (resend_reasoning=False)
    reply: str | None = None  # an assistant message waiting for its usage record
    calls = _Calls(reader, builder)
    for lineno, record in reader:
        kind = record.get("type")
        if kind in ("header", "session"):
            builder.model = str(record.get("model") or "") or builder.model
            window = read_window(record.get("window"), reader, f"line {lineno}: window")
            builder.window = window or builder.window
        elif kind == "compaction":
            builder.compacted = True
        elif kind == "usage":
            usage = as_dict(record.get("usage")) or record
            call = calls.call(usage, lineno, reply, record.get("model"))
            reply = None
            if call is not None:
                yield call
        elif kind == "message":
            message = as_dict(record.get("message")) or record
            role = str(message.get("role", ""))
            usage = as_dict(message.get("usage"))
            if role == "assistant" and usage:
                call = calls.call(usage, lineno, _text(message), message.get("model"))
                if call is not None:
                    yield call
            elif role == "assistant":  # its usage follows as a record of its own
                reply = _text(message)
            elif role:
                summary = bool(as_dict(message.get("meta")).get("summary"))
                builder.compacted = builder.compacted or summary
                builder.add(role, _text(message), task=role == "user" and not summary)
