"""Pi coding-agent session JSONL: one call per assistant message with ``usage``.

Pi's ``usage.input`` excludes cache reads and writes (``totalTokens`` = input + output +
cacheRead + cacheWrite in the recorded sessions), so context = input + cacheRead + cacheWrite.
"""

from __future__ import annotations

from collections.abc import Iterator

from ctxbudget.messages.usage import Usage
from ctxbudget.replay.importers._builder import CallBuilder, block_text, read_usage
from ctxbudget.replay.importers._lines import LineReader, Record, as_dict, as_int
from ctxbudget.replay.trace import Call


def sniff(record: Record) -> bool:
    """True for a line that looks like a Pi session's."""
    if record.get("type") == "session" and "version" in record:
        return True
    message = as_dict(record.get("message"))
    return record.get("type") == "message" and "role" in message and "parentId" in record


def _usage(value: object) -> Usage:
    """Pi's own usage names, mapped here: Pi normalises every provider's report into them, so
    no provider reader applies. Its ``input`` excludes both cache parts; they are added back."""
    pi_usage = as_dict(value)
    cache_read = as_int(pi_usage.get("cacheRead"))
    cache_write = as_int(pi_usage.get("cacheWrite"))
    return Usage(
        input_tokens=as_int(pi_usage.get("input")) + cache_read + cache_write,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        output_tokens=as_int(pi_usage.get("output")),
    )


def _assistant(
    message: Record, builder: CallBuilder, reader: LineReader, lineno: int
) -> Call | None:
    pi_usage = as_dict(message.get("usage"))
    if not pi_usage:
        return None
    usage = read_usage(_usage, pi_usage, reader, f"line {lineno}")
    if usage is None or usage.is_zero:  # aborted replies carry an all-zero usage
        return None
    return builder.call(
        usage=usage,
        reply=block_text(message.get("content")),
        model=str(message.get("model") or "") or None,
    )


def read(reader: LineReader, builder: CallBuilder) -> Iterator[Call]:
    """Calls of a Pi session, in order."""
    builder.reasoning = "unknown"  # thinking is not reported apart from output
    for lineno, record in reader:
        kind = record.get("type")
        if kind == "model_change" and record.get("model"):
            builder.model = str(record["model"]).rsplit("/", 1)[-1]
        elif kind == "compaction":
            builder.compacted = True
        elif kind == "custom_message":  # extension context injected as a user message
            builder.add("user", block_text(record.get("content")))
        elif kind == "message":
            message = as_dict(record.get("message"))
            role = str(message.get("role", ""))
            if role == "assistant":
                call = _assistant(message, builder, reader, lineno)
                if call is not None:
                    yield call
            elif role:
                builder.add(role, block_text(message.get("content")), task=role == "user")
