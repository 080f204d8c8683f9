"""A scripted loopback model server that plays a long coding task, for tests with real clients.

It speaks the three wire APIs coding agents use — Chat Completions (``/v1/chat/completions``),
Responses (``/v1/responses``) and Anthropic Messages (``/v1/messages``, also ``?beta=true``, and
``/v1/messages/count_tokens``) — streamed and not, and answers like a model doing a task: it asks
for ``steps`` shell tool calls one after another (``cat`` of one task file each, so every step
adds a tool result of known size to the conversation), then gives ``final_answer``.

Each prompt is counted (o200k_base over the prompt's text, plus a fixed overhead, see
``prompt_tokens``) and one larger than ``window`` is refused with that API's real overflow error:

* Chat Completions: llama.cpp's body (``exceed_context_size_error`` with ``n_prompt_tokens`` and
  ``n_ctx``; tests/data/overflow/corpus.jsonl c045, from llama.cpp tools/server/server-context.cpp),
  refused when the prompt is ``>= n_ctx`` as llama.cpp does;
* Responses: OpenAI's ``context_length_exceeded`` body (corpus c091, the text OpenAI's Responses
  API sends);
* Messages: Anthropic's ``invalid_request_error`` "prompt is too long: N tokens > W maximum"
  (corpus c072, as Claude Code printed it).

Usage is reported as each API does (``prompt_tokens``; ``input_tokens``; ``input_tokens`` with the
cache fields). ``GET /props`` (llama.cpp's ``n_ctx``) and ``GET /v1/models`` (vLLM's
``max_model_len``) state the window so a gateway can discover it.

The server is threaded (stdlib only, a real socket: real clients and ``ctxbudget serve``
reach it over loopback) and records every request it saw in ``seen``. Its in-process sibling,
``scripted_upstream.py`` (an ASGI app the SDK tests reach through httpx), checks thinking
signatures and encrypted reasoning instead.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from ctxbudget.tokens import get_tokenizer

__all__ = [
    "FINAL_ANSWER",
    "PROMPT_OVERHEAD",
    "ScriptedUpstream",
    "Seen",
    "prompt_tokens",
    "write_task_files",
]

FINAL_ANSWER = "SCRIPTED-FINAL-ANSWER: all task files were read."
# Tokens a server adds around the rendered prompt (template frame, generation prompt).
PROMPT_OVERHEAD = 32
# Per message/item: role markers and separators of a chat template.
PER_ITEM_OVERHEAD = 4
# Fields that carry ids, flags or opaque blobs, not text the model reads.
_NOT_PROMPT_TEXT = frozenset(
    {
        "id",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        "type",
        "status",
        "signature",
        "encrypted_content",
        "cache_control",
        "media_type",
    }
)
# The shell tools the clients offer: Pi's `bash`, Claude Code's `Bash`, Codex's `exec_command`
# (older Codex: `shell`), OpenCode's `bash`.
_SHELL_TOOLS = ("bash", "exec_command", "shell", "local_shell")
# The last user text of a request that asks for a summary (a client's own compaction, or a
# gateway's summary call): answered with text, never a tool call, never counted as a step.
# Not "compact": OpenCode's message after its compaction says "was compacted" and asks to go on.
_SUMMARY_ASKS = ("summar", "context checkpoint")

Api = Literal["chat", "responses", "messages"]
Reply = Literal["tool", "final", "text", "overflow", "count"]


@dataclass(frozen=True, slots=True)
class Seen:
    """One request the upstream answered: which API, its counted size and what it replied."""

    api: Api
    path: str
    tokens: int
    reply: Reply
    stream: bool
    tool_names: tuple[str, ...]
    max_tokens: int | None
    step: int | None = None


def write_task_files(folder: Path, steps: int, lines_per_file: int = 60) -> list[Path]:
    """Write the ``steps`` files the scripted task reads; each is a few hundred tokens of text."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(1, steps + 1):
        path = folder / f"task_{number:02d}.txt"
        lines = (
            f"file {number:02d} line {line:03d}: the quick brown fox jumps over the lazy dog "
            f"while counting sheep number {number * 1000 + line}"
            for line in range(lines_per_file)
        )
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def _text_leaves(value: Any, out: list[str]) -> int:
    """Append every string a model would read under ``value``; return how many items it held."""
    if isinstance(value, str):
        out.append(value)
        return 1
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key not in _NOT_PROMPT_TEXT:
                _text_leaves(item, out)
        return 1
    if isinstance(value, Sequence):
        for item in value:
            _text_leaves(item, out)
        return len(value)
    return 0


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The upstream's count of a request's prompt: o200k_base over its text, plus overheads.

    Text is every string of the system prompt, instructions, messages or input items (ids and
    opaque blobs excepted); tools count as their JSON; each message or item adds
    ``PER_ITEM_OVERHEAD`` and the prompt ``PROMPT_OVERHEAD``.
    """
    parts: list[str] = []
    items = 0
    for key in ("system", "instructions"):
        if key in body:
            _text_leaves(body[key], parts)
    for key in ("messages", "input"):
        if key in body:
            items += _text_leaves(body[key], parts)
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], sort_keys=True))
    counter = get_tokenizer("o200k_base")
    return counter.count("\n".join(parts)) + PER_ITEM_OVERHEAD * items + PROMPT_OVERHEAD


def _tool_specs(body: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, JSON schema of the arguments) of each tool, whatever the API's tool shape."""
    specs = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, Mapping):
            continue
        inner = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        name = inner.get("name")
        schema = inner.get("parameters") or inner.get("input_schema") or {}
        if isinstance(name, str):
            specs.append((name, dict(schema) if isinstance(schema, Mapping) else {}))
    return specs


def _shell_call(
    specs: list[tuple[str, dict[str, Any]]], command: str, what: str
) -> tuple[str, dict[str, Any]] | None:
    """The first shell tool offered and its arguments to run ``command``; None when none is."""
    by_name = {name.lower(): (name, schema) for name, schema in specs}
    for wanted in _SHELL_TOOLS:
        if wanted not in by_name:
            continue
        name, schema = by_name[wanted]
        properties = schema.get("properties") or {}
        arguments: dict[str, Any] = {}
        for prop in ("command", "cmd"):
            if prop in properties:
                as_list = properties[prop].get("type") == "array"
                arguments[prop] = ["bash", "-lc", command] if as_list else command
                break
        else:
            arguments["command"] = command
        if "description" in properties:
            arguments["description"] = what
        return name, arguments
    return None


def _last_user_text(api: Api, body: Mapping[str, Any]) -> str:
    """The text of the request's last user turn (empty when it ends with a tool result)."""
    items = body.get("messages") if api != "responses" else body.get("input")
    if isinstance(items, str):
        return items
    if not isinstance(items, Sequence) or not items:
        return ""
    last = items[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return ""
    content = last.get("content")
    if isinstance(content, list) and any(
        isinstance(part, Mapping) and part.get("type") == "tool_result" for part in content
    ):
        texts = [
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        ]
        return "\n".join(str(text) for text in texts)
    parts: list[str] = []
    _text_leaves(content, parts)
    return "\n".join(parts)


def _jsonable_usage(api: Api, prompt: int, output: int) -> dict[str, Any]:
    """Usage the way each API reports it."""
    if api == "chat":
        return {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
        }
    if api == "responses":
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output,
        }
    return {
        "input_tokens": prompt,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def overflow_error(api: Api, prompt: int, window: int) -> tuple[int, dict[str, Any]]:
    """The real body each API's server sends for a prompt larger than its window."""
    if api == "chat":
        message = (
            f"request ({prompt} tokens) exceeds the available context size ({window} tokens), "
            "try increasing it"
        )
        error = {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt,
            "n_ctx": window,
        }
        return 400, {"error": error}
    if api == "responses":
        error = {
            "message": "Your input exceeds the context window of this model. "
            "Please adjust your input and try again.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
        return 400, {"error": error}
    error = {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {prompt} tokens > {window} maximum",
    }
    return 400, {"type": "error", "error": error, "request_id": "req_scripted"}


@dataclass
class _Turn:
    """What the model says this time: a tool call or a text."""

    kind: Reply
    text: str = ""
    tool: str = ""
    arguments: str = ""
    step: int | None = None


@dataclass
class ScriptedUpstream:
    """The scripted model server. ``with ScriptedUpstream(...) as up:`` serves on ``up.url``."""

    window: int
    task_dir: Path
    advertised_window: int | None = None
    """The window ``/props`` and ``/v1/models`` state; None: ``window``. A larger one plays a
    server whose real context is smaller than it says (overflow errors still state ``window``)."""
    steps: int = 30
    final_answer: str = FINAL_ANSWER
    model: str = "m"
    host: str = "127.0.0.1"
    dump_dir: Path | None = None
    seen: list[Seen] = field(default_factory=list)
    _served_steps: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ScriptedUpstream:
        """Serve on a free loopback port in a daemon thread."""
        upstream = self

        class Handler(_Handler):
            owner = upstream

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        if self.dump_dir is None and os.environ.get("CTXBUDGET_SCRIPTED_DUMP"):
            self.dump_dir = Path(os.environ["CTXBUDGET_SCRIPTED_DUMP"])
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL without ``/v1`` (``http://127.0.0.1:PORT``)."""
        assert self._server is not None, "start() the upstream first"
        return f"http://{self.host}:{self._server.server_address[1]}"

    # -- facts for assertions --------------------------------------------------------------
    @property
    def steps_served(self) -> int:
        """How many of the scripted tool calls were sent to the client."""
        return self._served_steps

    def rejected(self) -> list[Seen]:
        """The requests refused for overflowing the window."""
        return [s for s in self.seen if s.reply == "overflow"]

    def largest_accepted(self) -> int:
        """The largest prompt the upstream answered (0 when none)."""
        return max((s.tokens for s in self.seen if s.reply not in ("overflow", "count")), default=0)

    # -- the script ------------------------------------------------------------------------
    def _next_turn(self, api: Api, body: Mapping[str, Any]) -> _Turn:
        specs = _tool_specs(body)
        asks = _last_user_text(api, body).lower()
        summary = any(word in asks for word in _SUMMARY_ASKS)
        with self._lock:
            step = self._served_steps + 1
            if summary or not specs:
                # In the <analysis>/<summary> frame Claude Code's compaction asks for (it
                # rejects a summary without it as "empty"); other clients take the text as is.
                text = (
                    "<analysis>The user asked to print the task files one by one.</analysis>\n"
                    f"<summary>The assistant is printing task files one by one with the shell "
                    f"tool; {self._served_steps} of {self.steps} are printed so far, the rest "
                    "remain. Next step: print the next task file.</summary>"
                )
                return _Turn("text", text=text)
            if step > self.steps:
                return _Turn("final", text=self.final_answer)
            path = self.task_dir / f"task_{step:02d}.txt"
            call = _shell_call(specs, f"cat {path}", f"Print task file {step}")
            if call is None:
                return _Turn("text", text="No shell tool was offered.")
            self._served_steps = step
            name, arguments = call
            return _Turn("tool", tool=name, arguments=json.dumps(arguments), step=step)

    def handle(self, api: Api, path: str, body: Mapping[str, Any]) -> tuple[int, Any, _Turn | None]:
        """Count the prompt; refuse it, or pick this turn. Returns (status, error body, turn)."""
        tokens = prompt_tokens(body)
        stream = bool(body.get("stream"))
        names = tuple(name for name, _ in _tool_specs(body))
        max_tokens = (
            body.get("max_tokens")
            or body.get("max_completion_tokens")
            or body.get("max_output_tokens")
        )
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            number = len(self.seen) + 1
            (self.dump_dir / f"{number:03d}-{api}-{tokens}.json").write_text(json.dumps(body))
        if path.endswith("/count_tokens"):
            self.seen.append(Seen(api, path, tokens, "count", False, names, None))
            return 200, {"input_tokens": tokens}, None
        too_big = tokens >= self.window if api == "chat" else tokens > self.window
        if too_big:
            self.seen.append(Seen(api, path, tokens, "overflow", stream, names, max_tokens))
            status, error = overflow_error(api, tokens, self.window)
            return status, error, None
        turn = self._next_turn(api, body)
        self.seen.append(Seen(api, path, tokens, turn.kind, stream, names, max_tokens, turn.step))
        return 200, tokens, turn

    def next_id(self) -> int:
        """A fresh number for response ids."""
        return next(self._ids)


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 handler: JSON replies with a length, streams as chunked SSE."""

    protocol_version = "HTTP/1.1"
    owner: ScriptedUpstream

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``seen`` instead."""

    # -- plumbing --------------------------------------------------------------------------
    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, name: str | None, payload: Any) -> None:
        head = f"event: {name}\n" if name else ""
        self._chunk(f"{head}data: {json.dumps(payload)}\n\n")

    # -- routes ----------------------------------------------------------------------------
    def do_GET(self) -> None:
        route = self.path.split("?", 1)[0].rstrip("/")
        up = self.owner
        stated = up.advertised_window or up.window
        if route == "/props":
            settings = {"n_ctx": stated, "params": {"n_predict": -1}}
            self._send_json(200, {"default_generation_settings": settings, "total_slots": 1})
        elif route in ("/v1/models", "/models"):
            model = {
                "id": up.model,
                "object": "model",
                "owned_by": "scripted",
                "max_model_len": stated,
            }
            self._send_json(200, {"object": "list", "data": [model]})
        elif route in ("/health", "/healthz"):
            self._send_json(200, {"status": "ok"})
        else:
            self._send_json(404, {"error": {"message": f"no route {route}", "type": "not_found"}})

    def do_POST(self) -> None:
        route = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(
                400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
            )
            return
        api: Api
        if route.endswith("/chat/completions"):
            api = "chat"
        elif route.endswith("/responses"):
            api = "responses"
        elif route.endswith("/messages") or route.endswith("/messages/count_tokens"):
            api = "messages"
        else:
            self._send_json(404, {"error": {"message": f"no route {route}", "type": "not_found"}})
            return
        status, result, turn = self.owner.handle(api, route, body)
        if turn is None:
            self._send_json(status, result)
            return
        prompt = int(result)
        output = get_tokenizer("o200k_base").count(turn.text or turn.arguments) + 1
        model = str(body.get("model") or self.owner.model)
        number = self.owner.next_id()
        if api == "chat":
            self._chat(body, turn, prompt, output, model, number)
        elif api == "responses":
            self._responses(body, turn, prompt, output, model, number)
        else:
            self._messages(body, turn, prompt, output, model, number)

    # -- Chat Completions ------------------------------------------------------------------
    def _chat(self, body: Any, turn: _Turn, prompt: int, output: int, model: str, n: int) -> None:
        usage = _jsonable_usage("chat", prompt, output)
        call_id = f"call_{n:04d}"
        finish = "tool_calls" if turn.kind == "tool" else "stop"
        function = {"name": turn.tool, "arguments": turn.arguments}
        calls = [{"id": call_id, "type": "function", "function": function}]
        head = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
        }
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if turn.kind == "tool":
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": finish}
            self._send_json(200, {**head, "choices": [choice], "usage": usage})
            return
        chunk = {**head, "object": "chat.completion.chunk"}
        self._start_stream()
        first = {"role": "assistant", "content": None if turn.kind == "tool" else ""}
        self._chunk_data(
            {**chunk, "choices": [{"index": 0, "delta": first, "finish_reason": None}]}
        )
        if turn.kind == "tool":
            delta: dict[str, Any] = {"tool_calls": [{"index": 0, **calls[0]}]}
        else:
            delta = {"content": turn.text}
        self._chunk_data(
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        )
        self._chunk_data({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            self._chunk_data({**chunk, "choices": [], "usage": usage})
        self._chunk("data: [DONE]\n\n")
        self._end_stream()

    def _chunk_data(self, payload: Any) -> None:
        self._event(None, payload)

    # -- Responses -------------------------------------------------------------------------
    def _responses(
        self, body: Any, turn: _Turn, prompt: int, output: int, model: str, n: int
    ) -> None:
        usage = _jsonable_usage("responses", prompt, output)
        item: dict[str, Any]
        if turn.kind == "tool":
            item = {
                "type": "function_call",
                "id": f"fc_{n:04d}",
                "call_id": f"call_{n:04d}",
                "name": turn.tool,
                "arguments": turn.arguments,
                "status": "completed",
            }
        else:
            text_part = {"type": "output_text", "text": turn.text, "annotations": []}
            item = {
                "type": "message",
                "id": f"msg_{n:04d}",
                "status": "completed",
                "role": "assistant",
                "content": [text_part],
            }
        response: dict[str, Any] = {
            "id": f"resp_{n:04d}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": [item],
            "usage": usage,
            "error": None,
            "incomplete_details": None,
        }
        if not body.get("stream"):
            self._send_json(200, response)
            return
        sequence = itertools.count()

        def event(name: str, **fields: Any) -> None:
            self._event(name, {"type": name, "sequence_number": next(sequence), **fields})

        self._start_stream()
        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        event("response.created", response=pending)
        event("response.in_progress", response=pending)
        if turn.kind == "tool":
            event(
                "response.output_item.added",
                output_index=0,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=0,
                delta=turn.arguments,
            )
            event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=0,
                arguments=turn.arguments,
            )
        else:
            event(
                "response.output_item.added",
                output_index=0,
                item={**item, "content": [], "status": "in_progress"},
            )
            empty = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            event("response.content_part.added", **where, part=empty)
            event("response.output_text.delta", **where, delta=turn.text)
            event("response.output_text.done", **where, text=turn.text)
            event("response.content_part.done", **where, part=item["content"][0])
        event("response.output_item.done", output_index=0, item=item)
        event("response.completed", response=response)
        self._end_stream()

    # -- Anthropic Messages ----------------------------------------------------------------
    def _messages(
        self, body: Any, turn: _Turn, prompt: int, output: int, model: str, n: int
    ) -> None:
        usage = _jsonable_usage("messages", prompt, output)
        block: dict[str, Any]
        if turn.kind == "tool":
            block = {
                "type": "tool_use",
                "id": f"toolu_{n:04d}",
                "name": turn.tool,
                "input": json.loads(turn.arguments),
            }
        else:
            block = {"type": "text", "text": turn.text}
        stop = "tool_use" if turn.kind == "tool" else "end_turn"
        message = {
            "id": f"msg_{n:04d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            self._send_json(200, message)
            return
        self._start_stream()
        start_usage = {**usage, "output_tokens": 1}
        opening = {**message, "content": [], "stop_reason": None, "usage": start_usage}
        self._event("message_start", {"type": "message_start", "message": opening})
        if turn.kind == "tool":
            empty: dict[str, Any] = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": turn.arguments}
        else:
            empty = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": turn.text}
        self._event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": empty},
        )
        self._event(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )
        self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
        ending = {"stop_reason": stop, "stop_sequence": None}
        self._event(
            "message_delta",
            {"type": "message_delta", "delta": ending, "usage": {"output_tokens": output}},
        )
        self._event("message_stop", {"type": "message_stop"})
        self._end_stream()
