"""OpenAI Codex CLI rollout JSONL: one call per ``token_count`` event with new usage.

Codex emits each ``token_count`` event twice; a repeat has the same cumulative
``total_token_usage`` and is dropped. ``last_token_usage`` is the call's own usage
(``input_tokens`` includes the cached part, ``output_tokens`` includes reasoning) and
``model_context_window`` the window Codex used.
"""

from __future__ import annotations

from collections.abc import Iterator

from ctxbudget.messages.usage import Usage
from ctxbudget.replay.importers._builder import CallBuilder, block_text, read_usage, read_window
from ctxbudget.replay.importers._lines import LineReader, Record, as_dict, as_int
from ctxbudget.replay.trace import Call

# Tuples, not sets: a record's "type" may be any JSON value, a list or object included.
_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
# Items the model produced; everything else in the history was added by the harness or the user.
_MODEL_ITEMS = (
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "web_search_call",
    "reasoning",
)


def sniff(record: Record) -> bool:
    """True for a line that looks like a Codex rollout's."""
    return record.get("type") in _TYPES and "payload" in record


def _item(payload: Record, builder: CallBuilder, reply: list[str]) -> None:
    kind = payload.get("type")
    role = payload.get("role")
    if kind in _MODEL_ITEMS or (kind == "message" and role == "assistant"):
        if kind != "reasoning":  # reasoning summaries are not what was generated
            reply.append(block_text(payload.get("content") or payload))
    elif kind == "message":
        builder.add(str(role or "user"), block_text(payload.get("content")))
    elif kind is not None:
        builder.add("tool", block_text(payload.get("output") or payload.get("content")))


def _usage(value: object) -> Usage:
    """Codex's own ``TokenUsage`` names, mapped here: no provider reader knows them. Its
    ``input_tokens`` already includes ``cached_input_tokens`` and ``output_tokens`` includes
    ``reasoning_output_tokens`` (the Responses API's convention), so nothing is added up."""
    last = as_dict(value)
    return Usage(
        input_tokens=as_int(last.get("input_tokens")),
        cache_read_tokens=as_int(last.get("cached_input_tokens")),
        output_tokens=as_int(last.get("output_tokens")),
        reasoning_tokens=as_int(last.get("reasoning_output_tokens")),
    )


def read(reader: LineReader, builder: CallBuilder) -> Iterator[Call]:
    """Calls of a Codex rollout, in order, each token event counted once."""
    builder.reasoning = "dropped_between_tasks"
    last_total: Record | None = None
    reply: list[str] = []
    for lineno, record in reader:
        payload = as_dict(record.get("payload"))
        kind = record.get("type")
        if kind == "turn_context" and payload.get("model"):
            builder.model = str(payload["model"])
        elif kind == "compacted":
            builder.compacted = True
        elif kind == "response_item":
            _item(payload, builder, reply)
        elif kind == "event_msg" and payload.get("type") == "user_message":
            builder.task_start = True
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = as_dict(payload.get("info"))
            total = as_dict(info.get("total_token_usage"))
            last = as_dict(info.get("last_token_usage"))
            if not last or total == last_total:
                continue
            last_total = total
            where = f"line {lineno}: model_context_window"
            window = read_window(info.get("model_context_window"), reader, where)
            builder.window = window or builder.window
            usage = read_usage(_usage, last, reader, f"line {lineno}")
            if usage is not None:
                yield builder.call(usage=usage, reply="".join(reply))
            reply = []
