"""Added latency of `ctxbudget serve` (issue 27): the same requests straight to a loopback
upstream and through the gateway, side by side in one run, at ~1K / 32K / 128K-token
conversations, 1 client and 32 concurrent, streamed and not; the JSON-parse floor beside it;
the gateway's memory per idle conversation and after 1,000 conversations. ``--litellm`` adds
litellm's proxy as a target on the same upstream (issue 29). ``bare`` is the floor no gateway
avoids: the gateway's own stack (Starlette on uvicorn, its httpx upstream client, its
passthrough route) forwarding the body unchanged with nothing parsed, counted or saved; what
ctxbudget adds over it is what reading the conversation costs (``--no-bare``: leave it out).
``--nginx BINARY`` adds nginx as a plain reverse proxy (C, keep-alive, nothing parsed): what the
extra HTTP hop costs any gateway, the floor under ``bare``.

Run: PYTHONPATH=$PWD/src .venv/bin/python bench/gateway.py [--sizes 1000,32000,128000]
     [--conversations 6] [--steps 10] [--concurrent 32] [--concurrent-steps 4]
     [--litellm /path/to/venv/bin/python] [--no-bare] [--nginx /usr/sbin/nginx] [--idle 1000]
     [--no-write]

Conversations: the real mini-swe-agent session in tests/data/traces (system, task, then
assistant tool calls and their results), cycled to the size wanted with its tool-call ids
renamed; each conversation gets its own tag in the task, so the gateway sees distinct ones.
A conversation starts at the first step boundary at or past the size and grows one real step
(an assistant tool call and its result) per request, as an agent's does. The upstream is a
raw-asyncio HTTP/1.1 server (this file, ``upstream`` subcommand) that answers a fixed reply
with the conversation's exact o200k_base prompt size as usage (looked up from a table this
script counts once, so the upstream costs the same whatever sent the request).
Writes its block of bench/gateway.md.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).parent
TRACE = REPO / "tests" / "data" / "traces" / "mini-swe-agent_deepseek-chat_pydicom-901.traj.json"
TOKENIZER = "o200k_base"
MODEL = "bench"
REPLY = "Done: the change is in place and the tests pass."
REPLY_TOKENS = 11
SUMMARY_MARK = "You write handoff summaries"
"""The start of ctxbudget's summarizer system prompt (compaction/summarizer.py
``SUMMARIZER_SYSTEM``): a request that starts so is a compaction's summary call."""
TAG_RE = re.compile(r"\[bench conversation (\d{7})\]")
PYTHON = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}

Message = dict[str, Any]


# -- conversations --------------------------------------------------------------------------------


def trace_messages(path: Path = TRACE) -> tuple[Message, Message, list[list[Message]]]:
    """The recorded session as Chat Completions messages: its system prompt, its task, and its
    steps (an assistant message, with its tool calls, and the tool results that follow it)."""
    recorded = json.loads(path.read_text("utf-8"))["messages"]
    clean: list[Message] = []
    for raw in recorded:
        if raw["role"] not in ("system", "user", "assistant", "tool"):
            continue  # mini-swe-agent's final "exit" record is not a message
        msg: Message = {"role": raw["role"], "content": raw["content"]}
        calls = raw.get("tool_calls")
        if calls:
            # mini-swe-agent wrote the SDK objects with repr(): a Python literal
            listed = ast.literal_eval(calls) if isinstance(calls, str) else calls
            msg["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": dict(c["function"])} for c in listed
            ]
        if raw.get("tool_call_id"):
            msg["tool_call_id"] = raw["tool_call_id"]
        clean.append(msg)
    system, task, rest = clean[0], clean[1], clean[2:]
    steps: list[list[Message]] = []
    for msg in rest:
        if msg["role"] == "assistant" or not steps:
            steps.append([msg])
        else:
            steps[-1].append(msg)
    return system, task, steps


def _renamed(step: list[Message], rep: int) -> list[Message]:
    """A copy of ``step`` whose tool-call ids carry the repetition number (ids stay unique)."""
    if rep == 0:
        return step
    out = []
    for msg in step:
        msg = dict(msg)
        if "tool_calls" in msg:
            msg["tool_calls"] = [
                {**c, "id": f"{c['id']}_r{rep}", "function": dict(c["function"])}
                for c in msg["tool_calls"]
            ]
        if "tool_call_id" in msg:
            msg["tool_call_id"] = f"{msg['tool_call_id']}_r{rep}"
        out.append(msg)
    return out


def tagged_task(task: Message, tag: str) -> Message:
    """The task with the conversation's tag appended: a distinct conversation per tag."""
    return {**task, "content": f"{task['content']}\n[bench conversation {tag}]"}


def marked(message: Message, tag: str) -> Message:
    """A tool result with the conversation's tag in front: every summary call's input then
    names its conversation (the task, which holds the tag too, is kept out of summaries)."""
    if message["role"] != "tool":
        return message
    return {**message, "content": f"[bench conversation {tag}] {message['content']}"}


REFERENCE_TAG = "0000000"
"""Tags are 7 digits: o200k_base cuts digits in runs of three whatever surrounds them, so every
tag costs the same tokens and the template's counts hold for every conversation."""


@dataclass
class Template:
    """One long conversation (the trace cycled); every bench conversation is a prefix of it
    with its own tag. ``tokens[n]`` is the exact count of the first ``n`` messages (n at a step
    boundary), ``ends`` the step boundaries in order."""

    system: Message
    task: Message
    body: list[Message]
    """The messages after the task."""
    ends: list[int]
    tokens: dict[int, int]
    _marked: dict[str, list[Message]] = field(default_factory=dict)
    """Each live conversation's messages after the task, tagged (made once, as it grows)."""

    def messages(self, tag: str, n: int) -> list[Message]:
        """The first ``n`` messages of conversation ``tag``."""
        mine = self._marked.setdefault(tag, [])
        while len(mine) < n - 2:
            mine.append(marked(self.body[len(mine)], tag))
        return [self.system, tagged_task(self.task, tag), *mine[: n - 2]]

    def forget(self, tag: str) -> None:
        """Drop a finished conversation's tagged messages."""
        self._marked.pop(tag, None)

    def start(self, size: int) -> int:
        """The index in ``ends`` of the first step boundary at or past ``size`` tokens."""
        for i, n in enumerate(self.ends):
            if self.tokens[n] >= size:
                return i
        raise ValueError(f"the template holds {self.tokens[self.ends[-1]]:,} tokens, not {size:,}")


def build_template(max_tokens: int, tokenizer: str = TOKENIZER) -> Template:
    """The trace cycled until it holds ``max_tokens``, counted exactly at each step boundary
    (one incremental count a step: each message is read and counted once)."""
    from ctxbudget.counting import RequestCounter
    from ctxbudget.messages.model import Request
    from ctxbudget.messages.openai import message_from_openai

    system, task, steps = trace_messages()
    counter = RequestCounter(tokenizer)
    body: list[Message] = []
    ends: list[int] = []
    tokens: dict[int, int] = {}
    request = Request(
        system=system["content"],
        messages=(message_from_openai(tagged_task(task, REFERENCE_TAG)),),
    )
    rep = 0
    while True:
        for step in steps:
            renamed = _renamed(step, rep)
            body.extend(renamed)
            request = request.append(
                *(message_from_openai(marked(m, REFERENCE_TAG)) for m in renamed)
            )
            n = len(body) + 2
            ends.append(n)
            tokens[n] = counter.count(request).total
            if tokens[n] >= max_tokens:
                return Template(system, task, body, ends, tokens)
        rep += 1


def chat_body(messages: list[Message], *, stream: bool, max_tokens: int = 1024) -> bytes:
    """A Chat Completions request body as an agent sends it."""
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": max_tokens}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


# -- the loopback upstream ------------------------------------------------------------------------


@dataclass
class UpstreamStats:
    """What the upstream saw: every request's prompt size and every summary call."""

    requests: int = 0
    chat: int = 0
    over_window: int = 0
    max_prompt: int = 0
    prompts: list[int] = field(default_factory=list)
    summaries: int = 0
    summary_inputs: dict[str, int] = field(default_factory=dict)
    """How many summary calls had each input (a digest of its messages)."""
    summaries_by_tag: dict[str, int] = field(default_factory=dict)
    counted_exactly: int = 0

    def as_json(self) -> dict[str, Any]:
        """The stats as a JSON-ready dict."""
        return {
            "requests": self.requests,
            "chat": self.chat,
            "over_window": self.over_window,
            "max_prompt": self.max_prompt,
            "prompts": self.prompts,
            "summaries": self.summaries,
            "duplicate_summaries": sum(n - 1 for n in self.summary_inputs.values()),
            "summaries_by_tag": self.summaries_by_tag,
            "counted_exactly": self.counted_exactly,
        }


class Upstream:
    """A loopback Chat Completions server: fixed replies, exact usage, a window it enforces
    (a request over it gets vLLM's 400 context-length error and is recorded)."""

    def __init__(self, window: int, tokenizer: str = TOKENIZER) -> None:
        self.window = window
        self.tokenizer = tokenizer
        self.stats = UpstreamStats()
        self.table: dict[int, tuple[int, int]] = {}
        """Known prompt sizes: message count -> (tokens, length of the last message's text),
        for the bench's own unchanged conversations (see ``prompt_tokens``)."""
        self._counters: dict[str, Any] = {}
        self._read: dict[tuple[Any, ...], Any] = {}

    # HTTP/1.1 with keep-alive, Content-Length or chunked request bodies: what httpx and
    # aiohttp send. Enough for a loopback bench, not a general server.
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection until the client closes it."""
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await _read_chunked(reader)
                else:
                    body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, ctype, payload = self.route(method, target.split("?", 1)[0], body)
                writer.write(
                    b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
                    b"connection: keep-alive\r\n\r\n"
                    % (status, b"OK" if status == 200 else b"Error", ctype, len(payload))
                    + payload
                )
                await writer.drain()
        finally:
            writer.close()

    def route(self, method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        """(status, content type, payload) for one request."""
        json_type = b"application/json"
        if path.endswith("/chat/completions") and method == "POST":
            return self.chat(orjson.loads(body))
        if path.endswith("/models"):
            models = {"object": "list", "data": [_model_card(self.window)]}
            return 200, json_type, orjson.dumps(models)
        if path == "/_bench/stats":
            return 200, json_type, orjson.dumps(self.stats.as_json())
        if path == "/_bench/reset":
            self.stats = UpstreamStats()
            return 200, json_type, b"{}"
        if path == "/_bench/table" and method == "POST":
            self.table = {int(k): (v[0], v[1]) for k, v in orjson.loads(body).items()}
            return 200, json_type, b"{}"
        return 404, json_type, b'{"error":{"message":"not found","type":"not_found"}}'

    def chat(self, body: dict[str, Any]) -> tuple[int, bytes, bytes]:
        """A fixed reply (or a fixed handoff summary) with the prompt's exact size as usage."""
        self.stats.requests += 1
        messages = body.get("messages") or []
        first = messages[0].get("content") if messages else None
        is_summary = isinstance(first, str) and first.startswith(SUMMARY_MARK)
        tokens = self.prompt_tokens(messages, is_summary)
        self.stats.prompts.append(tokens)
        self.stats.max_prompt = max(self.stats.max_prompt, tokens)
        if tokens > self.window:
            self.stats.over_window += 1
            error = {
                "error": {
                    "message": f"This model's maximum context length is {self.window} tokens. "
                    f"However, you requested {tokens} tokens in the messages. Please reduce "
                    "the length of the messages.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            }
            return 400, b"application/json", orjson.dumps(error)
        if is_summary:
            self.stats.summaries += 1
            digest = str(hash(orjson.dumps(messages)))
            self.stats.summary_inputs[digest] = self.stats.summary_inputs.get(digest, 0) + 1
            found = TAG_RE.search(orjson.dumps(messages).decode())
            tag = found.group(1) if found else "?"
            self.stats.summaries_by_tag[tag] = self.stats.summaries_by_tag.get(tag, 0) + 1
            text = SUMMARY
        else:
            self.stats.chat += 1
            text = REPLY
        usage = {
            "prompt_tokens": tokens,
            "completion_tokens": REPLY_TOKENS,
            "total_tokens": tokens + REPLY_TOKENS,
        }
        if body.get("stream"):
            with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return 200, b"text/event-stream", _sse(text, usage if with_usage else None)
        reply = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", MODEL),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        return 200, b"application/json", orjson.dumps(reply)

    def prompt_tokens(self, messages: list[Message], is_summary: bool) -> int:
        """The prompt's exact size: from the table when it is one of the bench's unchanged
        conversations (same message count, same last message), else counted here with one
        incremental counter per conversation (as a model server tokenizes what it gets)."""
        if not is_summary and messages:
            known = self.table.get(len(messages))
            last = messages[-1].get("content")
            if known is not None and isinstance(last, str) and len(last) == known[1]:
                return known[0]
        from ctxbudget.counting import RequestCounter

        self.stats.counted_exactly += 1
        key = "summary"
        if not is_summary and len(messages) > 1:
            found = TAG_RE.search(str(messages[1].get("content", "")))
            key = found.group(1) if found else "?"
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = RequestCounter(self.tokenizer)
        total: int = counter.count(self.request(messages)).total
        return total

    def request(self, messages: list[Message]) -> Any:
        """The messages as ctxbudget's `Request`, each message read once and then reused
        (a conversation's requests repeat all but their last messages): reading 30K tokens of
        messages anew each request cost the upstream ~18 ms, more than the gateway."""
        from ctxbudget.messages.model import Request, join_system
        from ctxbudget.messages.openai import message_from_openai, request_from_openai

        lead = 0
        while lead < len(messages) and messages[lead].get("role") in ("system", "developer"):
            lead += 1
        if any(m.get("role") in ("system", "developer") for m in messages[lead:]):
            return request_from_openai({"messages": messages})  # not the bench's shape
        read = []
        for m in messages[lead:]:
            key = _message_key(m)
            found = self._read.get(key)
            if found is None:
                found = self._read[key] = message_from_openai(m)
            read.append(found)
        if len(self._read) > 200_000:
            self._read.clear()  # bounded: a long load run sees ~10 new messages a request
        system = join_system(str(m.get("content") or "") for m in messages[:lead])
        return Request(system=system, messages=tuple(read))


def _message_key(m: Message) -> tuple[Any, ...]:
    """What makes two Chat Completions messages the same message, as a hashable key."""
    content = m.get("content")
    calls = tuple(
        (c.get("id"), c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
        for c in m.get("tool_calls") or ()
    )
    text = content if isinstance(content, str) or content is None else orjson.dumps(content)
    return (m.get("role"), text, m.get("tool_call_id"), m.get("name"), calls)


SUMMARY = (
    "## Goal\nRemove the logging handler, formatter and level pydicom sets.\n\n"
    "## Constraints and preferences\nnone\n\n## Progress\n### Done\nPatch written.\n"
    "### In progress\nnone\n### Blocked\nnone\n\n## Key decisions\nnone\n\n## Errors\nnone\n"
)


def _model_card(window: int) -> dict[str, Any]:
    """vLLM's /v1/models entry: its ``max_model_len`` is the window."""
    return {"id": MODEL, "object": "model", "owned_by": "bench", "max_model_len": window}


def _sse(text: str, usage: dict[str, int] | None) -> bytes:
    """A streamed reply: role, content, finish, the usage chunk when asked for, [DONE]."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": text}),
        chunk({}, "stop"),
    ]
    if usage is not None:
        events.append({**chunk({}), "choices": [], "usage": usage})
    out = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    return out + b"data: [DONE]\n\n"


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked request body."""
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def serve_upstream(port: int, window: int, tokenizer: str) -> None:
    """Run the upstream until killed; prints ``ready PORT`` once listening."""

    async def main() -> None:
        upstream = Upstream(window, tokenizer)
        server = await asyncio.start_server(upstream.handle, "127.0.0.1", port, limit=2**26)
        bound = server.sockets[0].getsockname()[1]
        print(f"ready {bound}", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- child processes ------------------------------------------------------------------------------


def free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Child:
    """A server process this bench started (its own process group, ended by its id)."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    """The base URL clients use, with its ``/v1``."""
    log: Path

    def rss_kb(self) -> int:
        """Resident memory of the process and its children (kB)."""
        return tree_rss_kb(self.proc.pid)

    def stop(self) -> None:
        """End the process group this bench started."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def tree_rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` plus every descendant (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, ()))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def start_child(name: str, cmd: Sequence[str], port: int, where: Path, ready: str) -> Child:
    """Start ``cmd`` and wait (60 s at most) until ``GET ready`` answers on ``port``."""
    log = where / f"{name}.log"
    proc = subprocess.Popen(
        list(cmd),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**ENV, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"},
        start_new_session=True,
    )
    child = Child(name, proc, f"http://127.0.0.1:{port}/v1", log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(f"GET {ready} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
                if s.recv(12).startswith(b"HTTP/1.1 2"):
                    return child
        except OSError:
            pass
        time.sleep(0.2)
    child.stop()
    raise SystemExit(f"{name} did not answer {ready} on port {port}: see {log}")


def start_upstream(where: Path, window: int, tokenizer: str = TOKENIZER) -> Child:
    """The loopback upstream in its own process."""
    port = free_port()
    cmd = [PYTHON, __file__, "upstream", "--port", str(port), "--window", str(window)]
    return start_child("upstream", [*cmd, "--tokenizer", tokenizer], port, where, "/v1/models")


SERVE_APP = """
import sys, uvicorn
from pathlib import Path
from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.config import GatewayConfig
upstream, window, tokenizer, port, state, archives = sys.argv[1:7]
config = GatewayConfig(upstream=upstream, window=int(window), tokenizer=tokenizer,
                       port=int(port), state=state if "://" in state else Path(state),
                       archive_dir=Path(archives) if archives else None)
uvicorn.run(create_app(config), host="127.0.0.1", port=int(port), log_level="warning",
            access_log=False, lifespan="on")
"""
"""The gateway as ``ctxbudget serve`` runs it (its uvicorn settings), built from a
`GatewayConfig` directly: for a checkout whose CLI has no ``serve`` yet, and for settings the
CLI does not take (a ``redis://`` state: its ``--state`` is a path, which folds ``//``; an
archive folder per instance)."""


def start_gateway(
    where: Path,
    upstream: str,
    window: int,
    *,
    name: str = "gateway",
    tokenizer: str = TOKENIZER,
    state: str | None = None,
    archives: str | None = None,
) -> Child:
    """``ctxbudget serve`` in its own process, in front of ``upstream`` (``archives``: its own
    archive folder, which only a `GatewayConfig` takes, see `SERVE_APP`)."""
    import importlib.util

    port = free_port()
    state = state or str(where / f"{name}.sqlite3")
    cmd = [PYTHON, "-m", "ctxbudget.cli.main", "serve", "--upstream", upstream]
    cmd += ["--window", str(window), "--tokenizer", tokenizer, "--port", str(port)]
    cmd += ["--state", state]
    if importlib.util.find_spec("ctxbudget.cli.serve") is None or archives or "://" in state:
        print(f"{name}: create_app under uvicorn (state {state}, archives {archives})")
        cmd = [PYTHON, "-c", SERVE_APP, upstream, str(window), tokenizer, str(port), state]
        cmd.append(archives or "")
    return start_child(name, cmd, port, where, "/v1/models")


SERVE_BARE = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.routing import Route
from ctxbudget.agent.budget_session import MemorySessionStore
from ctxbudget.gateway.app import Gateway
from ctxbudget.gateway.config import GatewayConfig
upstream, port = sys.argv[1], int(sys.argv[2])
gateway = Gateway(GatewayConfig(upstream=upstream, window=1_000_000, port=port),
                  store=MemorySessionStore())
methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
app = Starlette(routes=[Route("/{path:path}", gateway.forward, methods=methods)])
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
            lifespan="off")
"""
"""The bare pass-through: `Gateway.forward` (the route every unguarded path takes: the body
read under the cap, sent with the gateway's `Upstream` client, the reply streamed back) as
the only route, under uvicorn as ``ctxbudget serve`` runs it. Nothing is parsed, counted,
archived or saved: the cost of the extra HTTP hop alone."""


def start_bare(where: Path, upstream: str) -> Child:
    """The bare pass-through (`SERVE_BARE`) in its own process, in front of ``upstream``."""
    port = free_port()
    cmd = [PYTHON, "-c", SERVE_BARE, upstream, str(port)]
    return start_child("bare", cmd, port, where, "/v1/models")


NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {where}/nginx.pid;
error_log {where}/nginx.err warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {where}/nginx-body;
    proxy_temp_path {where}/nginx-proxy;
    client_max_body_size 128m;
    client_body_buffer_size 64m;
    upstream model {{ server {upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://model;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""
"""nginx as a plain reverse proxy: one worker, keep-alive to the upstream, the request body
held in memory, the reply streamed (``proxy_buffering off``). A C proxy that reads nothing:
the hop's cost without Python, the floor under ``bare``."""


def start_nginx(where: Path, binary: str, upstream: str) -> Child:
    """``binary`` (an nginx) as a reverse proxy in front of ``upstream`` (`NGINX_CONF`)."""
    port = free_port()
    conf = where / "nginx.conf"
    hostport = upstream.split("://", 1)[1].split("/", 1)[0]
    conf.write_text(NGINX_CONF.format(where=where, upstream=hostport, port=port))
    return start_child(
        "nginx",
        [binary, "-c", str(conf), "-e", str(where / "nginx.err")],
        port,
        where,
        "/v1/models",
    )


def litellm_python(flag: str | None) -> str | None:
    """The Python whose ``litellm`` proxy to run: ``--litellm``'s, else this one's when it has
    ``litellm[proxy]`` installed, else None (the comparison is skipped, and the output says so).
    Keep it in its own virtual environment: its proxy extra pins packages (uvloop among them,
    which uvicorn would then pick for the gateway too) that would change what is measured."""
    if flag:
        return flag
    import importlib.util

    here = Path(sys.executable)
    if here.with_name("litellm").exists() and importlib.util.find_spec("fastapi"):
        return str(here)
    return None


def start_litellm(where: Path, python: str, upstream: str) -> Child:
    """litellm's proxy (one worker) with one model routed to ``upstream`` as OpenAI-compatible."""
    port = free_port()
    config = where / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream}\n"
        "      api_key: sk-bench\n"
        "general_settings:\n"
        f"  master_key: {BENCH_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  turn_off_message_logging: true\n"
    )
    litellm = Path(python).with_name("litellm")
    cmd = [str(litellm), "--config", str(config), "--port", str(port), "--num_workers", "1"]
    return start_child("litellm", cmd, port, where, "/health/liveliness")


# -- the client -----------------------------------------------------------------------------------


BENCH_KEY = "sk-bench-0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"
"""The key every client sends (litellm's proxy will not start without a master key)."""
HEADERS = {"content-type": "application/json", "authorization": f"Bearer {BENCH_KEY}"}


@dataclass
class Sample:
    """One request's outcome."""

    seconds: float
    status: int
    tokens: int
    headers: dict[str, str] = field(default_factory=dict)


async def send(client: Any, url: str, body: bytes, stream: bool, tokens: int) -> Sample:
    """POST one request and read its whole reply; the time covers both. A connection that
    fails is an error of this target (status 0, named on stderr), not the end of the run."""
    import httpx

    start = time.perf_counter()
    try:
        if stream:
            async with client.stream("POST", url, content=body, headers=HEADERS) as reply:
                await reply.aread()
        else:
            reply = await client.post(url, content=body, headers=HEADERS)
    except httpx.TransportError as exc:
        print(f"bench: {url}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return Sample(time.perf_counter() - start, 0, tokens)
    elapsed = time.perf_counter() - start
    kept = {
        k: v
        for k, v in reply.headers.items()
        if k.startswith("x-ctxbudget") or k == "x-litellm-overhead-duration-ms"
    }
    return Sample(elapsed, reply.status_code, tokens, kept)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear between the two nearest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def parse_floor(bodies: Sequence[bytes], runs: int = 30) -> float:
    """Median seconds orjson takes to parse each body once (median over bodies)."""
    medians = []
    for body in bodies:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            orjson.loads(body)
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return statistics.median(medians)


SMALL = 8_000
"""Below this size a conversation is measured over 1 step (and more conversations), so that
its requests stay near the size: ten steps would add ~2K tokens to a 1K conversation."""

_serial = iter(range(10**9))


def new_tag() -> str:
    """A fresh conversation tag (see `REFERENCE_TAG`)."""
    return f"{next(_serial):07d}"


@dataclass
class Cell:
    """Latencies for one (size, clients, stream) cell, by target."""

    size: int
    clients: int
    stream: bool
    steps: dict[str, list[Sample]] = field(default_factory=dict)
    first: dict[str, list[Sample]] = field(default_factory=dict)
    wall: dict[str, float] = field(default_factory=dict)
    bodies: list[bytes] = field(default_factory=list)
    floor: float = 0.0
    """Seconds orjson takes to parse one of this size's bodies (the 1-client cell's)."""


async def one_client(
    client: Any,
    targets: dict[str, str],
    template: Template,
    cell: Cell,
    conversations: int,
    steps: int,
) -> None:
    """One client, targets alternated request by request (the order flipped every request) on
    the same bodies: each target sees its own copy of every conversation."""
    begin = template.start(cell.size)
    names = list(targets)
    for c in range(conversations):
        tags = {name: new_tag() for name in names}
        for s in range(steps + 1):
            n = template.ends[begin + s]
            order = names if (c + s) % 2 == 0 else names[::-1]
            for name in order:
                body = chat_body(template.messages(tags[name], n), stream=cell.stream)
                if name == names[0] and len(cell.bodies) < 8:
                    cell.bodies.append(body)
                sample = await send(
                    client,
                    targets[name] + "/chat/completions",
                    body,
                    cell.stream,
                    template.tokens[n],
                )
                (cell.first if s == 0 else cell.steps).setdefault(name, []).append(sample)
        for tag in tags.values():
            template.forget(tag)


async def concurrent_phase(name: str, url: str, template: Template, cell: Cell, steps: int) -> None:
    """``cell.clients`` agents at once against one target, each its own conversation and its
    own client (one keep-alive connection: a shared httpx pool's scan grows with its size).
    Every agent's first request (the gateway counts a whole new conversation) goes first, all
    at once; the steps after it are the timed phase (``cell.wall``, requests per second)."""
    import httpx

    begin = template.start(cell.size)
    tags = [new_tag() for _ in range(cell.clients)]
    clients = [httpx.AsyncClient(timeout=300) for _ in tags]

    async def agent(tag: str, client: httpx.AsyncClient, first: int, last: int) -> None:
        for s in range(first, last):
            n = template.ends[begin + s]
            body = chat_body(template.messages(tag, n), stream=cell.stream)
            sample = await send(
                client, url + "/chat/completions", body, cell.stream, template.tokens[n]
            )
            (cell.first if s == 0 else cell.steps).setdefault(name, []).append(sample)

    try:
        await asyncio.gather(*(agent(t, c, 0, 1) for t, c in zip(tags, clients, strict=True)))
        start = time.perf_counter()
        await asyncio.gather(
            *(agent(t, c, 1, steps + 1) for t, c in zip(tags, clients, strict=True))
        )
        cell.wall[name] = cell.wall.get(name, 0.0) + time.perf_counter() - start
    finally:
        for tag, client in zip(tags, clients, strict=True):
            template.forget(tag)
            await client.aclose()


async def measure_cells(
    targets: dict[str, str],
    template: Template,
    sizes: Sequence[int],
    args: argparse.Namespace,
) -> list[Cell]:
    """Every (size, clients, stream) cell, the targets interleaved."""
    import httpx

    cells = []
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        for url in targets.values():  # warm each target: imports, connections, tokenizer
            for s in range(3):
                n = template.ends[s]
                body = chat_body(template.messages(new_tag(), n), stream=bool(s % 2))
                await send(client, url + "/chat/completions", body, bool(s % 2), 0)
        for size in sizes:
            for stream in (False, True):
                cell = Cell(size, 1, stream)
                conversations, steps = args.conversations, args.steps
                if size < SMALL:  # a step is ~200 tokens: short conversations stay near size
                    conversations, steps = max(1, conversations * steps // 2), 1
                await one_client(client, targets, template, cell, conversations, steps)
                cell.floor = parse_floor(cell.bodies)
                cells.append(cell)
                report_cell(cell, targets)
            if args.concurrent:
                cell = Cell(size, args.concurrent, True, floor=cells[-1].floor)
                for _ in range(args.rounds):  # phases alternated, each target alone in its own
                    for name in targets:
                        await concurrent_phase(
                            name, targets[name], template, cell, args.concurrent_steps
                        )
                cells.append(cell)
                report_cell(cell, targets)
    return cells


# -- results --------------------------------------------------------------------------------------


def summary_row(cell: Cell, name: str, base: str, floor: float) -> dict[str, Any]:
    """The numbers of one target in one cell, ``base`` being the direct upstream."""
    own = [s.seconds for s in cell.steps.get(name, [])]
    ref = [s.seconds for s in cell.steps.get(base, [])]
    errors = sum(s.status != 200 for s in cell.steps.get(name, []) + cell.first.get(name, []))
    tokens = [s.tokens for s in cell.steps.get(name, [])]
    row: dict[str, Any] = {
        "size": cell.size,
        "clients": cell.clients,
        "stream": cell.stream,
        "target": name,
        "n": len(own),
        "errors": errors,
        "tokens": int(statistics.mean(tokens)) if tokens else 0,
        "p50_ms": percentile(own, 0.5) * 1e3,
        "p99_ms": percentile(own, 0.99) * 1e3,
        "floor_ms": floor * 1e3,
        "first_median_ms": percentile([s.seconds for s in cell.first.get(name, [])], 0.5) * 1e3,
    }
    if name != base:
        row["added_p50_ms"] = row["p50_ms"] - percentile(ref, 0.5) * 1e3
        row["added_p99_ms"] = row["p99_ms"] - percentile(ref, 0.99) * 1e3
        row["first_added_ms"] = (
            row["first_median_ms"]
            - percentile([s.seconds for s in cell.first.get(base, [])], 0.5) * 1e3
        )
        if floor > 0:
            row["ratio_p50"] = row["added_p50_ms"] / row["floor_ms"]
            row["ratio_p99"] = row["added_p99_ms"] / row["floor_ms"]
    said = [
        float(s.headers["x-litellm-overhead-duration-ms"])
        for s in cell.steps.get(name, [])
        if "x-litellm-overhead-duration-ms" in s.headers
    ]
    if said:  # litellm's own figure for its overhead, beside the measured one
        row["self_p50_ms"], row["self_p99_ms"] = percentile(said, 0.5), percentile(said, 0.99)
    if cell.wall.get(name):  # the timed phases hold the steps, not the first requests
        row["rps"] = len(cell.steps.get(name, [])) / cell.wall[name]
    return row


def report_cell(cell: Cell, targets: dict[str, str]) -> None:
    """Print one cell's rows as they come (the run is long; the table comes at the end)."""
    base = next(iter(targets))
    for name in targets:
        row = summary_row(cell, name, base, cell.floor)
        print(
            json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
            flush=True,
        )


def table(rows: list[dict[str, Any]], base: str) -> list[str]:
    """The Markdown table of every row."""
    out = [
        "| tokens | clients | stream | target | requests | errors | p50 ms | p99 ms "
        "| added p50 ms | added p99 ms | parse floor ms | added p50 / floor | added p99 / floor "
        "| req/s | self-reported p50 / p99 ms |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        direct = r["target"] == base

        def cell(key: str, fmt: str = "{:.2f}", r: dict[str, Any] = r, d: bool = direct) -> str:
            return "—" if d or key not in r else fmt.format(r[key])

        rps = f"{r['rps']:.0f}" if "rps" in r else "—"
        said = f"{r['self_p50_ms']:.1f} / {r['self_p99_ms']:.1f}" if "self_p50_ms" in r else "—"
        out.append(
            f"| {r['tokens']:,} | {r['clients']} | {'yes' if r['stream'] else 'no'} "
            f"| {r['target']} | {r['n']} | {r['errors']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {cell('added_p50_ms')} | {cell('added_p99_ms')} | {r['floor_ms']:.3f} "
            f"| {cell('ratio_p50', '{:.1f}×')} | {cell('ratio_p99', '{:.1f}×')} | {rps} "
            f"| {said} |"
        )
    return out


def over_bare(rows: list[dict[str, Any]]) -> list[str]:
    """What ctxbudget adds over the bare pass-through (the hop every gateway pays), beside the
    parse floor: the part of its added latency that reading the conversation costs."""
    by = {(r["size"], r["clients"], r["stream"], r["target"]): r for r in rows}
    out = [
        "ctxbudget over the bare pass-through (the same hop, nothing read), beside the parse "
        "floor:",
        "",
        "| tokens | clients | stream | ctxbudget added p50 / p99 ms | bare added p50 / p99 ms "
        "| ctxbudget − bare p50 / p99 ms | (ctxbudget − bare) / parse, p50 / p99 |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for (size, clients, stream, target), mine in by.items():
        bare = by.get((size, clients, stream, "bare"))
        if target != "ctxbudget" or bare is None or "added_p50_ms" not in bare:
            continue
        p50 = mine["added_p50_ms"] - bare["added_p50_ms"]
        p99 = mine["added_p99_ms"] - bare["added_p99_ms"]
        floor = mine["floor_ms"]
        ratio = f"{p50 / floor:.1f}× / {p99 / floor:.1f}×" if floor > 0 else "—"
        out.append(
            f"| {mine['tokens']:,} | {clients} | {'yes' if stream else 'no'} "
            f"| {mine['added_p50_ms']:.2f} / {mine['added_p99_ms']:.2f} "
            f"| {bare['added_p50_ms']:.2f} / {bare['added_p99_ms']:.2f} "
            f"| {p50:.2f} / {p99:.2f} | {ratio} |"
        )
    return [*out, ""] if len(out) > 4 else []


def first_table(rows: list[dict[str, Any]], base: str) -> list[str]:
    """A new conversation's first request (the gateway counts all of it): medians."""
    out = [
        "| tokens | clients | stream | target | median ms | added ms |",
        "|---:|---:|---|---|---:|---:|",
    ]
    for r in rows:
        added = "—" if r["target"] == base else f"{r['first_added_ms']:.2f}"
        out.append(
            f"| {r['tokens']:,} | {r['clients']} | {'yes' if r['stream'] else 'no'} "
            f"| {r['target']} | {r['first_median_ms']:.2f} | {added} |"
        )
    return out


def load_conditions() -> str:
    """The machine's load while the bench ran (other jobs share it)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} CPUs"


# -- memory ---------------------------------------------------------------------------------------


async def idle_memory(gateway: Child, template: Template, count: int) -> dict[str, float]:
    """The gateway's RSS after a warm-up (its tokenizer loaded: ~60 MB that the first
    request costs once) and after ``count`` more new ~1K-token conversations (one request
    each, then left idle), and the growth per conversation."""
    import httpx

    n = template.ends[template.start(1_000)]
    warm_up = 20
    rss: list[int] = []
    async with httpx.AsyncClient(timeout=120) as client:
        for i in range(warm_up + count):
            if i == warm_up:
                await asyncio.sleep(1)
                rss.append(gateway.rss_kb())
            tag = new_tag()
            body = chat_body(template.messages(tag, n), stream=False)
            template.forget(tag)
            reply = await send(client, gateway.url + "/chat/completions", body, False, 0)
            if reply.status != 200:
                raise SystemExit(f"idle conversation {i}: HTTP {reply.status}")
    await asyncio.sleep(1)
    rss.append(gateway.rss_kb())
    return {
        "conversations": count,
        "warm_up": warm_up,
        "tokens_each": template.tokens[n],
        "rss_before_mb": rss[0] / 1024,
        "rss_after_mb": rss[1] / 1024,
        "per_conversation_kb": (rss[1] - rss[0]) / count,
    }


# -- main -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the flags and run the bench (or the upstream, as a child)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    up = sub.add_parser("upstream", help="run the loopback upstream (used as a child)")
    up.add_argument("--port", type=int, default=0)
    up.add_argument("--window", type=int, default=1_000_000)
    up.add_argument("--tokenizer", default=TOKENIZER)
    parser.add_argument("--sizes", default="1000,32000,128000")
    parser.add_argument("--conversations", type=int, default=6, help="per cell, one client")
    parser.add_argument("--steps", type=int, default=10, help="requests per conversation")
    parser.add_argument("--concurrent", type=int, default=32, help="0: skip that cell")
    parser.add_argument("--concurrent-steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="alternated phases, concurrent")
    parser.add_argument("--window", type=int, default=1_000_000, help="upstream and gateway")
    parser.add_argument("--litellm", metavar="PYTHON", help="a Python with litellm[proxy]")
    parser.add_argument("--no-bare", action="store_true", help="no bare pass-through target")
    parser.add_argument("--nginx", metavar="BINARY", help="add nginx as a C reverse proxy target")
    parser.add_argument(
        "--tmpfs", action="store_true", help="add a gateway with its state in /dev/shm"
    )
    parser.add_argument("--direct-only", action="store_true", help="no gateway (harness check)")
    parser.add_argument("--idle", type=int, default=1000, help="conversations for memory; 0: skip")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/gateway.md")
    parser.add_argument(
        "--out", type=Path, default=HERE, metavar="DIR", help="write DIR/gateway.md, not bench/'s"
    )
    args = parser.parse_args(argv)
    if args.command == "upstream":
        serve_upstream(args.port, args.window, args.tokenizer)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.time()
    template = build_template(max(sizes) + 8_000)
    print(
        f"template: {len(template.body) + 2} messages, {template.tokens[template.ends[-1]]:,} "
        f"tokens ({time.time() - started:.1f} s)",
        flush=True,
    )
    where = Path(tempfile.mkdtemp(prefix="ctxbudget-gwbench-"))
    cleanup = [where]
    children: list[Child] = []
    try:
        upstream = start_upstream(where, args.window)
        children.append(upstream)
        post_table(upstream, template)
        targets = {"direct": upstream.url}
        if not args.direct_only:
            gateway = start_gateway(where, upstream.url, args.window)
            children.append(gateway)
            targets["ctxbudget"] = gateway.url
        if not args.no_bare and not args.direct_only:
            bare = start_bare(where, upstream.url)
            children.append(bare)
            targets["bare"] = bare.url
        if args.tmpfs and not args.direct_only:
            # the same gateway with its state and archives in memory: fsync costs nothing
            # there, so the difference to the row above is what durable writes cost
            shm = Path(tempfile.mkdtemp(prefix="ctxbudget-gwbench-", dir="/dev/shm"))
            cleanup.append(shm)
            fast = start_gateway(shm, upstream.url, args.window, name="gateway-tmpfs")
            children.append(fast)
            targets["ctxbudget-tmpfs"] = fast.url
        if args.nginx and not args.direct_only:
            proxy = start_nginx(where, args.nginx, upstream.url)
            children.append(proxy)
            targets["nginx"] = proxy.url
        lite_python = litellm_python(args.litellm)
        if lite_python is None:
            print("litellm[proxy] not found: no litellm column (see --litellm)", flush=True)
        else:
            lite = start_litellm(where, lite_python, upstream.url)
            children.append(lite)
            targets["litellm"] = lite.url
        conditions = load_conditions()
        cells = asyncio.run(measure_cells(targets, template, sizes, args))
        conditions += f" at the start, {load_conditions()} at the end"
        rows = []
        for cell in cells:
            rows.extend(summary_row(cell, name, "direct", cell.floor) for name in targets)
        rss = {c.name: c.rss_kb() / 1024 for c in children}
        counted = upstream_stats(upstream)["counted_exactly"]
        print(f"upstream: {counted} requests counted by the upstream itself", flush=True)
        memory = None
        if args.idle and not args.direct_only:
            gateway.stop()
            fresh = start_gateway(where, upstream.url, args.window, name="gateway-idle")
            children.append(fresh)
            memory = asyncio.run(idle_memory(fresh, template, args.idle))
        text = render(rows, memory, rss, conditions, argv)
        print(text)
        if not args.no_write:
            from blocks import write_block  # bench/blocks.py, beside this script

            write_block(args.out / "gateway.md", "gateway.py", text)
    finally:
        for child in children:
            child.stop()
        for folder in cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def _table(template: Template) -> dict[str, tuple[int, int]]:
    """The upstream's table: message count -> (tokens, length of the last message's text)."""
    last = template.messages(REFERENCE_TAG, template.ends[-1])
    return {
        str(n): (template.tokens[n], len(str(last[n - 1].get("content")))) for n in template.ends
    }


def post_table(upstream: Child, template: Template) -> None:
    """Give the upstream the template's sizes, so that it looks up, not counts, the bench's
    unchanged conversations."""
    import httpx

    url = upstream.url.rsplit("/v1", 1)[0] + "/_bench/table"
    httpx.post(url, content=orjson.dumps(_table(template)), timeout=30).raise_for_status()


def upstream_stats(child: Child) -> dict[str, Any]:
    """The upstream's record of what reached it."""
    import httpx

    url = child.url.rsplit("/v1", 1)[0] + "/_bench/stats"
    stats: dict[str, Any] = httpx.get(url, timeout=30).json()
    return stats


def render(
    rows: list[dict[str, Any]],
    memory: dict[str, float] | None,
    rss: dict[str, float],
    conditions: str,
    argv: Sequence[str] | None,
) -> str:
    """This script's block of bench/gateway.md."""
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        "Command:",
        "",
        f"    PYTHONPATH=$PWD/src .venv/bin/python bench/gateway.py {flags}".rstrip(),
        "",
        f"Conditions: {conditions}.",
        "",
        "Steps of a conversation (history + one agent step; the gateway knows the history):",
        "",
        *table([r for r in rows], "direct"),
        "",
        "A new conversation's first request (the gateway counts the whole history), median:",
        "",
        *first_table([r for r in rows if r["clients"] == 1], "direct"),
        "",
        *over_bare(rows),
        "RSS at the end of the run (MB): "
        + ", ".join(f"{name} {mb:.1f}" for name, mb in rss.items()),
    ]
    if memory:
        lines += [
            "",
            f"Memory: a fresh gateway at {memory['rss_before_mb']:.1f} MB RSS after "
            f"{memory['warm_up']:.0f} warm-up conversations (its tokenizer loaded), "
            f"{memory['rss_after_mb']:.1f} MB after {memory['conversations']:,.0f} more "
            f"conversations of {memory['tokens_each']:,.0f} tokens (one request each, then idle): "
            f"{memory['per_conversation_kb']:.1f} kB per idle conversation.",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
