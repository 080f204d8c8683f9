"""Claude Code session JSONL: one API call per ``message.id``, its last line carries the output.

Claude Code writes an assistant message over several lines, one per content block; all but the
last carry a start-of-message usage snapshot. The usage is Anthropic's, read by
`usage_from_anthropic` (its ``input_tokens`` excludes both cache parts). Sidechain (sub-agent)
lines are another conversation with its own context, so they are left out of the main curve.
"""

from __future__ import annotations

from collections.abc import Iterator

from ctxbudget.budget.usage import usage_from_anthropic
from ctxbudget.replay.importers._builder import CallBuilder, block_text, read_usage
from ctxbudget.replay.importers._lines import LineReader, Record, as_dict, as_list
from ctxbudget.replay.trace import Call

# Tuples, not sets: a record's "type" may be any JSON value, a list or object included.
_TYPES = ("user", "assistant", "system", "summary")


def sniff(record: Record) -> bool:
    """True for a line that looks like Claude Code's."""
    return record.get("type") in _TYPES and ("sessionId" in record or "leafUuid" in record)


def _is_prompt(message: Record, record: Record) -> bool:
    """A real user prompt: text typed by the user, not a tool result or a meta line."""
    if record.get("isMeta") or record.get("isCompactSummary"):
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    blocks = [as_dict(b) for b in as_list(content)]
    return any(b.get("type") == "text" for b in blocks) and not any(
        b.get("type") == "tool_result" for b in blocks
    )


class _Pending:
    """The assistant message being assembled from its lines."""

    def __init__(self, message_id: str) -> None:
        self.id = message_id
        self.parts: list[str] = []
        self.usage: Record = {}
        self.usage_line = 0
        self.model: str | None = None

    def to_call(self, builder: CallBuilder, reader: LineReader) -> Call | None:
        if not self.usage:
            return None
        usage = read_usage(usage_from_anthropic, self.usage, reader, f"line {self.usage_line}")
        if usage is None or usage.is_zero:  # "<synthetic>" error replies report all zeros
            return None
        return builder.call(usage=usage, reply="".join(self.parts), model=self.model)


def read(reader: LineReader, builder: CallBuilder) -> Iterator[Call]:
    """Calls of a Claude Code session, in order."""
    builder.reasoning = "unknown"  # thinking is not reported apart from output
    pending: _Pending | None = None
    for lineno, record in reader:
        if record.get("isSidechain"):
            continue
        message = as_dict(record.get("message"))
        kind = record.get("type")
        if kind == "assistant" and message.get("id"):
            if pending is not None and pending.id != message["id"]:
                call = pending.to_call(builder, reader)
                if call is not None:
                    yield call
                pending = None
            pending = pending or _Pending(str(message["id"]))
            pending.parts.append(block_text(message.get("content")))
            if as_dict(message.get("usage")):
                pending.usage, pending.usage_line = message["usage"], lineno
            pending.model = str(message.get("model") or "") or pending.model
        elif kind == "user" and message:
            if pending is not None:
                call = pending.to_call(builder, reader)
                if call is not None:
                    yield call
                pending = None
            if record.get("isCompactSummary"):
                builder.compacted = True
            builder.add(
                "user", block_text(message.get("content")), task=_is_prompt(message, record)
            )
        elif kind == "summary":
            builder.compacted = True
    if pending is not None:
        call = pending.to_call(builder, reader)
        if call is not None:
            yield call
