"""The gateway in front of a real llama.cpp server (issues 27 and 28), on all three APIs the
pinned llama-server serves (Chat Completions, Anthropic Messages, Responses):

- its window read from the server's ``/props`` when none is given;
- its count (``x-ctxbudget-tokens``) equal to the prompt tokens the server reports, on seeded
  conversations with tools, whole and streamed, and on the bodies whose conversion by llama.cpp
  once read them apart from the gateway (`test_llamacpps_conversions_count_alike`: a Responses
  turn of several items, empty ``instructions``, Messages system blocks);
- a tool loop driven far past the server's ``-c 2048`` never gets an overflow error: the
  gateway compacts, the summaries written by the served model itself (random weights: garbage
  text, which is all a summary needs to be here);
- told too large a window, the gateway reads llama.cpp's own overflow error, adopts its
  ``n_ctx`` and retries, unseen by the client.

The gateway runs in-process under uvicorn on a loopback port (`serve_on_loopback`), counting
with ``hf:`` the Qwen2.5 folder the served GGUF was written from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_harness import SERVER_CTX, LlamaServer
from test_count import TOOLS, generated_request
from tests.gateway.loopback import serve_on_loopback

from ctxbudget.counting import RequestCounter
from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.messages_api import COUNT_TOKENS_PATH, MESSAGES
from ctxbudget.gateway.responses import RESPONSES
from ctxbudget.messages.model import Message, Request, ToolCall
from ctxbudget.messages.openai import request_to_openai

pytestmark = pytest.mark.server

SEEDED = 24
"""Seeded requests with tools sent through the gateway per API."""
REPLY_TOKENS = 4
"""``max_tokens`` of each step of the long conversation: replies are random text, keep them
short (the server generates them all, ``--ignore-eos``)."""
PAST_WINDOW = 3
"""The long conversation goes on until the client's own history is this many windows long."""
FILE = (
    "def handler(event, context):\n    # reads the queue, writes the table\n"
    "    rows = [parse(line) for line in event['lines'] if line.strip()]\n"
    "    return {'written': len(rows), 'errors': [r for r in rows if r.bad]}\n"
)


# -- each API's wire form of a library request, and what its reply says ------------------------


def _arguments(call: ToolCall) -> Any:
    return json.loads(call.arguments)


def chat_body(request: Request) -> dict[str, Any]:
    """A Chat Completions body."""
    return {"model": "qwen2.5-tiny", **request_to_openai(request)}


def messages_body(request: Request) -> dict[str, Any]:
    """An Anthropic Messages body as Claude Code writes one: roles alternate, so tool results
    and the user's next text share a user message (``tool_result`` blocks first); tool calls
    are ``tool_use`` blocks; the system prompt is a list of text blocks."""
    items: list[dict[str, Any]] = []

    def user_blocks() -> list[dict[str, Any]]:
        last = items[-1] if items else None
        if last is None or last["role"] != "user":
            last = {"role": "user", "content": []}
            items.append(last)
        blocks: list[dict[str, Any]] = last["content"]
        return blocks

    for message in request.messages:
        if message.role == "tool":
            block = {"type": "tool_result", "tool_use_id": message.tool_call_id}
            user_blocks().append({**block, "content": message.text})
        elif message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c)}
                for c in message.tool_calls
            )
            items.append({"role": "assistant", "content": blocks})
        else:
            user_blocks().append({"type": "text", "text": message.text})
    body: dict[str, Any] = {
        "model": "qwen2.5-tiny",
        "max_tokens": request.max_output_tokens,
        "messages": items,
    }
    if request.system:  # Anthropic has no empty system prompt
        body["system"] = [{"type": "text", "text": request.system}]
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    return body


def responses_body(request: Request) -> dict[str, Any]:
    """A Responses body: ``instructions``, then messages, ``function_call`` and
    ``function_call_output`` items."""
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.text,
                }
            )
            continue
        if message.text or not message.tool_calls:
            # "type" written out, as Codex writes it: the pinned llama-server refuses an
            # assistant message without it ("Cannot determine type of 'item'").
            items.append({"type": "message", "role": message.role, "content": message.text})
        items.extend(
            {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
            for c in message.tool_calls
        )
    body: dict[str, Any] = {
        "model": "qwen2.5-tiny",
        "max_output_tokens": request.max_output_tokens,
        "input": items,
    }
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in request.tools
        ]
    return body


def _chat_prompt(reply: dict[str, Any]) -> int:
    return int(reply["usage"]["prompt_tokens"])


def _messages_prompt(reply: dict[str, Any]) -> int:
    """Anthropic's prompt: input + cache creation + cache read (llama.cpp reports the part
    its prompt cache held as ``cache_read_input_tokens``)."""
    usage = reply["usage"]
    return sum(
        int(usage.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )


def _responses_prompt(reply: dict[str, Any]) -> int:
    return int(reply["usage"]["input_tokens"])  # the cached part included


def _chat_text(reply: dict[str, Any]) -> str:
    return str(reply["choices"][0]["message"]["content"] or "")


def _messages_text(reply: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in reply["content"] if b.get("type") == "text")


def _responses_text(reply: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in reply["output"]
        if item.get("type") == "message"
        for part in item.get("content", ())
    )


def _events(text: str) -> list[dict[str, Any]]:
    """The JSON data of a server-sent event stream."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: ") and line[6:].strip() != "[DONE]":
            out.append(json.loads(line[6:]))
    return out


def _chat_streamed(events: list[dict[str, Any]]) -> int:
    return next(_chat_prompt(e) for e in events if e.get("usage"))


def _messages_streamed(events: list[dict[str, Any]]) -> int:
    """``message_start`` carries the prompt's usage."""
    return next(_messages_prompt(e["message"]) for e in events if e["type"] == "message_start")


def _responses_streamed(events: list[dict[str, Any]]) -> int:
    done = (e for e in events if e.get("type") == "response.completed")
    return next(_responses_prompt(e["response"]) for e in done)


@dataclass(frozen=True)
class Wire:
    """One API as the tests drive it."""

    path: str
    body: Callable[[Request], dict[str, Any]]
    prompt_tokens: Callable[[dict[str, Any]], int]
    streamed_prompt_tokens: Callable[[list[dict[str, Any]]], int]
    text: Callable[[dict[str, Any]], str]


WIRES = {
    "chat": Wire(CHAT.path, chat_body, _chat_prompt, _chat_streamed, _chat_text),
    "messages": Wire(
        MESSAGES.path, messages_body, _messages_prompt, _messages_streamed, _messages_text
    ),
    "responses": Wire(
        RESPONSES.path, responses_body, _responses_prompt, _responses_streamed, _responses_text
    ),
}


# -- the gateway on loopback -------------------------------------------------------------------


@dataclass(frozen=True)
class Gateway:
    url: str
    """Base URL, no ``/v1``."""
    client: httpx.Client


@contextmanager
def _gateway(
    server: LlamaServer, folder: Path, where: Path, window: int | None = None
) -> Iterator[Gateway]:
    """A fresh gateway (its own state under ``where``) in front of ``server``, told
    ``window`` (None: no ``--window``, the gateway asks the server)."""
    config = GatewayConfig(
        upstream=server.base_url,
        window=window,
        tokenizer=f"hf:{folder}",
        state=where / "state.sqlite3",
        archive_dir=where / "archives",
        port=0,
    )
    app = create_app(config, apis=(CHAT, RESPONSES, MESSAGES))
    with serve_on_loopback(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield Gateway(url, client)


@pytest.fixture
def gateway(
    qwen_generating_server: LlamaServer, qwen_folder: Path, tmp_path: Path
) -> Iterator[Gateway]:
    """A fresh gateway in front of the llama-server, told no window."""
    with _gateway(qwen_generating_server, qwen_folder, tmp_path) as served:
        yield served


def _seeded_with_tools(
    count: int, keep: Callable[[Request], bool] = lambda request: True
) -> list[Request]:
    """The server tier's seeded requests (`generated_request`) that carry tools (and that
    ``keep`` keeps)."""
    out: list[Request] = []
    seed = 0
    while len(out) < count:
        request = generated_request(seed)
        if request.tools and keep(request):
            out.append(request)
        seed += 1
    return out


SEEDED_FOR = {"chat": lambda r: True, "messages": lambda r: True, "responses": lambda r: True}
"""Which seeded requests each API's count is checked on: all of them (Responses turns of
several items included, which llama.cpp reads as one assistant message, as the gateway does)."""


# -- the tests ---------------------------------------------------------------------------------


def test_the_window_is_the_servers_n_ctx_from_props(
    gateway: Gateway, qwen_generating_server: LlamaServer
) -> None:
    props = httpx.get(f"http://127.0.0.1:{qwen_generating_server.port}/props", timeout=30)
    n_ctx = props.json()["default_generation_settings"]["n_ctx"]
    assert n_ctx == SERVER_CTX  # one slot: the slot's context is the whole -c
    reply = gateway.client.post(CHAT.path, json=chat_body(_seeded_with_tools(1)[0]))
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-ctxbudget-window"] == str(n_ctx)
    status = gateway.client.get("/ctxbudget/status").json()
    assert (status["window"], status["window_source"]) == (n_ctx, "llama.cpp /props n_ctx")


@pytest.mark.parametrize("api", WIRES)
def test_the_gateways_count_is_the_servers_prompt_tokens(gateway: Gateway, api: str) -> None:
    """Seeded conversations with tools, tool calls and results, CJK, emoji, each a new
    conversation: the header the gateway sends back equals the prompt the server reports,
    whole and streamed (every fourth request)."""
    wire = WIRES[api]
    wrong = []
    for seed, request in enumerate(_seeded_with_tools(SEEDED, SEEDED_FOR[api])):
        body = wire.body(request)
        if seed % 4 == 3:
            body = {**body, "stream": True}
            if api == "chat":  # else the gateway strips the usage chunk it asked for
                body["stream_options"] = {"include_usage": True}
        reply = gateway.client.post(wire.path, json=body)
        assert reply.status_code == 200, reply.text
        ours = int(reply.headers["x-ctxbudget-tokens"])
        if body.get("stream"):
            server = wire.streamed_prompt_tokens(_events(reply.text))
        else:
            server = wire.prompt_tokens(reply.json())
        if ours != server:
            wrong.append((seed, server, ours))
    assert wrong[:5] == [], f"{len(wrong)} of {SEEDED} differ (seed, server, gateway)"


def test_count_tokens_through_the_gateway_is_the_servers_prompt(gateway: Gateway) -> None:
    """``POST /v1/messages/count_tokens`` (Claude Code asks it) through the gateway: the
    ``input_tokens`` it answers are the prompt the server then reports for the same request.
    (On this branch the gateway routes no count_tokens: llama.cpp's own answer passes
    through; once the gateway answers it, this checks its answer.)"""
    for request in _seeded_with_tools(6):
        body = messages_body(request)
        count_body = {k: v for k, v in body.items() if k != "max_tokens"}  # it has none
        counted = gateway.client.post(COUNT_TOKENS_PATH, json=count_body)
        assert counted.status_code == 200, counted.text
        reply = gateway.client.post(MESSAGES.path, json=body)
        assert reply.status_code == 200, reply.text
        assert counted.json()["input_tokens"] == _messages_prompt(reply.json())


# Where the gateway's reading of a request and llama.cpp's conversion of it to a chat request
# once parted (llama.cpp: tools/server/server-common.cpp, ``convert_responses_to_chatcmpl`` and
# ``convert_anthropic_to_oai``): the gateway now reads each as the server does.
CONVERSIONS = [
    pytest.param(
        RESPONSES.path,
        {
            "input": [
                {"type": "message", "role": "user", "content": "Read both files."},
                {"type": "message", "role": "assistant", "content": "Reading them."},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "read_file",
                    "arguments": '{"path": "a.py"}',
                },
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": "read_file",
                    "arguments": '{"path": "b.py"}',
                },
                {"type": "function_call_output", "call_id": "c1", "output": "x = 1"},
                {"type": "function_call_output", "call_id": "c2", "output": "y = 2"},
            ],
            "tools": [{"type": "function", "name": "read_file", "parameters": {}}],
            "max_output_tokens": 1,
        },
        id="responses-turn-of-several-items",
    ),
    pytest.param(
        RESPONSES.path,
        {"instructions": "", "input": "hi", "max_output_tokens": 1},
        id="responses-empty-instructions",
    ),
    pytest.param(
        MESSAGES.path,
        {
            "system": [
                {"type": "text", "text": "You are a coding agent."},
                {"type": "text", "text": "Be brief."},
            ],
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1,
        },
        id="messages-system-blocks",
    ),
]


@pytest.mark.parametrize(("path", "body"), CONVERSIONS)
def test_llamacpps_conversions_count_alike(
    gateway: Gateway, path: str, body: dict[str, Any]
) -> None:
    reply = gateway.client.post(path, json={"model": "qwen2.5-tiny", **body})
    assert reply.status_code == 200, reply.text
    usage = reply.json()["usage"]
    server = _messages_prompt(reply.json()) if path == MESSAGES.path else usage["input_tokens"]
    assert int(reply.headers["x-ctxbudget-tokens"]) == server


def _step(turn: int) -> tuple[Message, Message]:
    """One agent step after a reply: a call to ``read_file`` (random weights call no tool; the
    client's loop does as if the reply had) and the file it read."""
    call = ToolCall(
        id=f"call_{turn}", name="read_file", arguments=json.dumps({"path": f"src/m{turn}.py"})
    )
    content = f"# src/m{turn}.py\n" + FILE * 4
    return (
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content=content, tool_call_id=call.id, name=call.name),
    )


@dataclass
class Drive:
    """What driving one conversation through the gateway saw."""

    steps: int = 0
    compacted: int = 0
    windows: set[int] = field(default_factory=set)
    """The ``x-ctxbudget-window`` values the gateway sent back."""
    request: Request | None = None
    """The client's whole history at the end."""


def _drive(gateway: Gateway, api: str, folder: Path, until: int) -> Drive:
    """A tool loop through the gateway until the client's own history counts ``until``
    tokens. Every step must be answered (odd ones streamed, as agents stream), and the
    gateway's count of what it forwarded must be the prompt the server reports, within the
    server's window."""
    wire = WIRES[api]
    request = Request(
        system="You are a coding agent. Read files with read_file.",
        tools=TOOLS,
        messages=(Message(role="user", content="Review every module under src/ for bugs."),),
        max_output_tokens=REPLY_TOKENS,
    )
    counter = RequestCounter(f"hf:{folder}")
    drive = Drive()
    while counter.count(request).total < until:
        body = wire.body(request)
        streamed = drive.steps % 2 == 1
        if streamed:
            body = {**body, "stream": True}
            if api == "chat":
                body["stream_options"] = {"include_usage": True}
        reply = gateway.client.post(wire.path, json=body)
        where = f"step {drive.steps}"
        assert reply.status_code == 200, f"{where}: {reply.text}"
        if streamed:
            events = _events(reply.text)
            assert not any("error" in e for e in events), f"{where}: {reply.text[-2000:]}"
            server = wire.streamed_prompt_tokens(events)
        else:
            server = wire.prompt_tokens(reply.json())
            assert isinstance(wire.text(reply.json()), str)  # a reply of the API's own shape
        sent = int(reply.headers["x-ctxbudget-tokens"])
        assert sent == server, where
        assert sent + REPLY_TOKENS <= SERVER_CTX, where
        drive.compacted += reply.headers["x-ctxbudget-compacted"] == "1"
        drive.windows.add(int(reply.headers["x-ctxbudget-window"]))
        request = request.with_messages((*request.messages, *_step(drive.steps)))
        drive.steps += 1
    drive.request = request
    return drive


@pytest.mark.parametrize("api", WIRES)
def test_a_conversation_far_past_the_window_gets_no_overflow(
    gateway: Gateway, qwen_generating_server: LlamaServer, qwen_folder: Path, api: str
) -> None:
    """A tool loop whose history grows to `PAST_WINDOW` times the server's window: every step
    is answered (the gateway compacts, the served model writing the summary), each forwarded
    request counted exactly and within the window; the same history sent to the server
    directly is refused as too long."""
    drive = _drive(gateway, api, qwen_folder, PAST_WINDOW * SERVER_CTX)
    status = gateway.client.get("/ctxbudget/status").json()
    assert drive.compacted >= 2 and status["summary_calls"] >= 2, (drive, status)
    assert len(status["conversations"]) == 1  # one conversation throughout
    assert status["conversations"][0]["overflows"] == 0  # compacted before, never after
    assert drive.request is not None
    direct = httpx.post(
        f"http://127.0.0.1:{qwen_generating_server.port}{WIRES[api].path}",
        json=WIRES[api].body(drive.request),
        timeout=120,
    )
    assert direct.status_code == 400, direct.text
    assert direct.json()["error"]["type"] == "exceed_context_size_error"


@pytest.mark.parametrize("api", WIRES)
def test_a_window_told_too_large_is_corrected_by_the_servers_overflow_error(
    qwen_generating_server: LlamaServer, qwen_folder: Path, tmp_path: Path, api: str
) -> None:
    """A gateway told 4x the server's window (as a harness that believes a model's trained
    length): the server's own overflow error (llama.cpp's ``exceed_context_size_error``, the
    same body on all three APIs) is recognised, its stated ``n_ctx`` adopted, the request
    compacted and retried: the client sees no error, and every later request fits."""
    told = 4 * SERVER_CTX
    with _gateway(qwen_generating_server, qwen_folder, tmp_path, window=told) as gateway:
        drive = _drive(gateway, api, qwen_folder, 2 * SERVER_CTX)
        status = gateway.client.get("/ctxbudget/status").json()
    assert drive.windows == {told, SERVER_CTX}, drive.windows  # told, then the server's
    (conversation,) = status["conversations"]
    assert conversation["overflows"] >= 1 and conversation["window"] == SERVER_CTX
