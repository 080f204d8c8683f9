"""Hypothesis strategies for hostile input: arbitrary bytes, JSON lines and mutated real lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from tests.json_strategies import json_values as shared_json_values
from tests.json_strategies import mutated_json

from ctxbudget.messages.model import ImagePart, Message, Request, TextPart, ToolCall, ToolSpec

TRACE_FILES = {
    "claude-code": "claude-code_guideai-session-processing_claude-code-sample-1.jsonl",
    "codex": "codex-cli_guideai-session-processing_sample-codex-session.jsonl",
    "mini-swe-agent": "mini-swe-agent_deepseek-chat_pydicom-901.traj.json",
    "pi": "pi-agent_pinion05-agent-complex-task_03-raddit-dashboard-pr.jsonl",
}
_MAX_LINE = 20_000  # longer real lines add time per example, not new shapes

# Keys and values the importers look at, so that arbitrary records reach deep into a reader.
IMPORTER_KEYS = (
    "type", "message", "usage", "payload", "info", "sessionId", "leafUuid", "parentId", "role",
    "content", "id", "model", "input_tokens", "output_tokens", "cache_read_input_tokens",
    "cache_creation_input_tokens", "input", "output", "cacheRead", "cacheWrite", "request",
    "response", "choices", "messages", "prompt_tokens", "completion_tokens", "total_token_usage",
    "last_token_usage", "model_context_window", "isSidechain", "isCompactSummary", "isMeta",
    "tool_calls", "text", "thinking", "arguments", "name", "window", "version", "extra",
    "trajectory_format", "completion_tokens_details", "prompt_tokens_details", "meta",
)  # fmt: skip
IMPORTER_STRINGS = (
    "user", "assistant", "system", "summary", "message", "session", "usage", "compaction",
    "header", "response_item", "event_msg", "turn_context", "compacted", "session_meta",
    "token_count", "user_message", "function_call", "reasoning", "tool", "model_change",
    "custom_message", "text", "tool_result", "tool_use",
)  # fmt: skip

SPECIAL_TOKENS = (
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<tool_response>", "</tool_response>", "<|fim_prefix|>", "<|endofprompt|>",
    "<|vision_start|>", "<|image_pad|>",
)  # fmt: skip
# Every code point, lone surrogates included: a Python str may hold them.
any_chars = st.characters(codec=None, exclude_categories=())
any_text = st.lists(
    st.sampled_from(SPECIAL_TOKENS) | st.text(any_chars, max_size=20) | st.text(max_size=20),
    max_size=6,
).map("".join)

json_values = shared_json_values(IMPORTER_KEYS, IMPORTER_STRINGS, big_integers=True)
json_objects = st.dictionaries(
    st.sampled_from(IMPORTER_KEYS) | st.text(max_size=6), json_values, max_size=6
)


@st.composite
def deep_json(draw: st.DrawFn) -> str:
    """A value nested deeper than any parser or printer recursion limit (or just below it)."""
    depth = draw(st.sampled_from([200, 500, 900, 990, 3000, 100_000]))
    open_, close = draw(st.sampled_from([("[", "]"), ('{"content":', "}"), ('{"a":[', "]}")]))
    inner = open_ * depth + draw(st.sampled_from(["1", '"x"', "[]"])) + close * depth
    key = draw(st.sampled_from(["content", "model", "type", "usage", "message", "payload"]))
    return json.dumps({"type": draw(st.sampled_from(IMPORTER_STRINGS)), key: "@"}).replace(
        '"@"', inner
    )


garbage_lines = (
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" "))
    | st.text(max_size=40).map(lambda t: t.replace("\n", " ").encode("utf-8", "surrogatepass"))
    | json_values.map(lambda v: json.dumps(v).encode())
    | deep_json().map(str.encode)
    | st.sampled_from([b"", b"{", b"[]", b"null", b"NaN", b'{"type": "message"', b"\xff\xfe"])
)


def read_samples(traces_dir: Path) -> dict[str, list[Any]]:
    """Parsed records of each shared trace (the trajectory's messages for mini-swe-agent)."""
    samples: dict[str, list[Any]] = {}
    for fmt, name in TRACE_FILES.items():
        raw = (traces_dir / name).read_bytes()
        if fmt == "mini-swe-agent":
            document = json.loads(raw)
            samples[fmt] = [{k: v for k, v in document.items() if k != "messages"}]
            samples[fmt] += [m for m in document["messages"] if len(json.dumps(m)) < _MAX_LINE]
        else:
            samples[fmt] = [_parse(x) for x in raw.splitlines() if 0 < len(x) < _MAX_LINE]
    samples["ctxbudget"] = _archive_records()
    samples["openai-log"] = _openai_log_records()
    return samples


def _parse(line: bytes) -> Any:
    """A real line's record; a line real tools wrote that is not valid JSON stays bytes."""
    try:
        return json.loads(line)
    except ValueError:
        return line


def _archive_records() -> list[Any]:
    """A small ctxbudget archive (no shared trace of our own format exists)."""
    return [
        {"type": "header", "model": "qwen3-8b", "window": 32768},
        {"type": "message", "seq": 1, "message": {"role": "user", "content": "list the files"}},
        {"type": "message", "seq": 2, "message": {"role": "assistant", "content": "ls"}},
        {"type": "usage", "seq": 3, "usage": {"input_tokens": 900, "output_tokens": 12}},
        {"type": "message", "seq": 4, "role": "tool", "content": [{"type": "text", "text": "a"}]},
        {"type": "compaction", "seq": 5, "compaction_id": "c1"},
        {
            "type": "message",
            "seq": 6,
            "message": {
                "role": "assistant",
                "content": "done",
                "tool_calls": [{"id": "1", "name": "ls", "arguments": "{}"}],
                "usage": {"input_tokens": 1200, "output_tokens": 30, "reasoning_tokens": 5},
            },
        },
    ]


def _openai_log_records() -> list[Any]:
    """A small OpenAI {request, response} log, chat completions and Responses shapes."""
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    return [
        {
            "request": {"model": "gpt-4o", "messages": chat},
            "response": {
                "model": "gpt-4o",
                "choices": [{"message": {"role": "assistant", "content": "hello"}}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 3},
            },
        },
        {
            "request": {"model": "gpt-5", "input": [*chat, {"role": "user", "content": "more"}]},
            "response": {
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "x"}]}],
                "usage": {
                    "input_tokens": 40,
                    "output_tokens": 9,
                    "output_tokens_details": {"reasoning_tokens": 4},
                    "input_tokens_details": {"cached_tokens": 20},
                },
            },
        },
    ]


def mutated_record(record: Any) -> st.SearchStrategy[Any]:
    """``record`` with one to three members replaced by arbitrary JSON, retyped or removed."""
    return mutated_json(record, json_values, retype=True)


@st.composite
def mutated_lines(draw: st.DrawFn, records: list[Any]) -> list[bytes]:
    """A run of real records, some mutated, some truncated, with garbage lines put in."""
    start = draw(st.integers(0, len(records) - 1))
    chosen = records[start : start + draw(st.integers(1, 12))]
    lines: list[bytes] = []
    for record in chosen:
        if draw(st.integers(0, 3)) == 0 and not isinstance(record, bytes):
            record = draw(mutated_record(record))
        line = (
            record
            if isinstance(record, bytes)
            else json.dumps(record, ensure_ascii=draw(st.booleans())).encode(
                "utf-8", "surrogatepass"
            )
        )
        if draw(st.integers(0, 7)) == 0:
            line = line[: draw(st.integers(0, len(line)))]
        lines.append(line)
    for _ in range(draw(st.integers(0, 3))):
        lines.insert(draw(st.integers(0, len(lines))), draw(garbage_lines))
    return lines


@st.composite
def session_bytes(draw: st.DrawFn, samples: dict[str, list[Any]]) -> bytes:
    """The content of a would-be session file: real-looking, arbitrary or plain garbage."""
    kind = draw(st.sampled_from(["real", "real", "real", "json-lines", "bytes", "trajectory"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "json-lines":
        rows = draw(st.lists(json_objects.map(lambda o: json.dumps(o).encode()) | garbage_lines))
        return b"\n".join(rows)
    if kind == "trajectory":
        header, *messages = samples["mini-swe-agent"]
        body = dict(header)
        start = draw(st.integers(0, len(messages) - 1))
        body["messages"] = messages[start : start + draw(st.integers(0, 8))]
        if draw(st.booleans()):
            body = draw(mutated_record(body))
        text = json.dumps(body, indent=draw(st.sampled_from([None, 1])))
        if draw(st.integers(0, 5)) == 0:
            text = text[: draw(st.integers(0, len(text)))]
        return text.encode("utf-8", "surrogatepass")
    fmt = draw(st.sampled_from(["claude-code", "codex", "pi", "ctxbudget", "openai-log"]))
    return b"\n".join(draw(mutated_lines(samples[fmt]))) + draw(st.sampled_from([b"", b"\n"]))


# --- chat requests with hostile text ------------------------------------------------------

_names = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)
_arguments = json_values.map(json.dumps) | any_text
tool_calls = st.lists(
    st.builds(ToolCall, id=st.text(max_size=6), name=_names | any_text, arguments=_arguments),
    max_size=2,
)
images = st.builds(
    ImagePart,
    url=st.none() | st.just("data:image/png;base64,iVBORw0KGgo="),
    width=st.none() | st.integers(1, 20_000),
    height=st.none() | st.integers(1, 20_000),
    detail=st.sampled_from([None, "auto", "low", "high"]),
)
contents = any_text | st.lists(st.builds(TextPart, any_text) | images, max_size=3).map(tuple)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """Any message a valid request may hold, its text drawn from every code point."""
    role = draw(st.sampled_from(["user", "assistant", "tool"]))
    content = draw(contents)
    if role == "assistant":
        reasoning = draw(st.none() | any_text)
        calls = tuple(draw(tool_calls))
        return Message(role=role, content=content, reasoning=reasoning, tool_calls=calls)
    if role == "tool":
        return Message(role=role, content=content, tool_call_id=draw(st.text(max_size=4)))
    return Message(role=role, content=content, name=draw(st.none() | _names))


tool_specs = st.builds(
    ToolSpec,
    name=_names,
    description=any_text,
    parameters=st.dictionaries(st.text(max_size=6), json_values, max_size=3),
)
requests = st.builds(
    lambda system, tools, msgs, model: Request(
        system=system, tools=tuple(tools), messages=tuple(msgs), model=model
    ),
    any_text,
    st.lists(tool_specs, max_size=2),
    st.lists(messages(), max_size=6),
    st.none() | st.sampled_from(["gpt-4o", "claude-sonnet-4", "qwen3-8b", "unknown-model"]),
)
