"""A JSONL log of OpenAI ``{request, response}`` pairs (chat completions or Responses API).

Each request carries the whole conversation; the messages added since the previous call are
those past the previous request's messages and its reply. A request that is not an extension
of the previous one means the harness rewrote the history (a compaction). Usage is read by
`usage_from_any` (chat ``prompt_tokens`` already includes the cached part; so does Responses'
``input_tokens``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ctxbudget.budget.usage import usage_from_any
from ctxbudget.replay.importers._builder import CallBuilder, block_text, read_usage
from ctxbudget.replay.importers._lines import LineReader, Record, as_dict, as_int, as_list
from ctxbudget.replay.trace import Call


def sniff(record: Record) -> bool:
    """True for a line with a request and a response object."""
    return isinstance(record.get("request"), dict) and isinstance(record.get("response"), dict)


def _messages(request: Record) -> list[Any]:
    return as_list(request.get("messages")) or as_list(request.get("input"))


def _message_text(message: Any) -> str:
    m = as_dict(message)
    calls = m.get("tool_calls")
    return block_text(m.get("content")) + (json.dumps(calls) if calls else "")


def _reply(response: Record) -> str:
    choices = as_list(response.get("choices"))
    if choices:
        return _message_text(as_dict(choices[0]).get("message"))
    return block_text(as_list(response.get("output")))


def read(reader: LineReader, builder: CallBuilder) -> Iterator[Call]:
    """Calls of the log, in order."""
    builder.reasoning = "dropped"  # chat completions do not take reasoning back
    seen = 0
    for lineno, record in reader:
        if not sniff(record):
            reader.skip(lineno, "no 'request' and 'response' objects")
            continue
        request, response = record["request"], record["response"]
        messages = _messages(request)
        if len(messages) < seen:
            builder.compacted, seen = True, 0
        for m in messages[seen:]:
            role = str(as_dict(m).get("role", "user"))
            builder.add(role, _message_text(m), task=role == "user")
        seen = len(messages) + 1  # the reply comes back as the next request's message
        if response.get("usage") is None:  # no report: the messages count, no call is made
            continue
        usage = read_usage(usage_from_any, response["usage"], reader, f"line {lineno}")
        if usage is None or usage.is_zero:
            continue
        model = response.get("model") or request.get("model")
        yield builder.call(
            usage=usage,
            reply=_reply(response),
            model=str(model) if model else None,
            max_tokens=_max_tokens(request),
        )


def _max_tokens(request: Record) -> int | None:
    """The reply limit the request set (chat: max_tokens / max_completion_tokens; Responses:
    max_output_tokens)."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = as_int(request.get(key))
        if value:
            return value
    return None
