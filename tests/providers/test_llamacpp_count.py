"""``LlamaCppCounter`` against a scripted server with llama.cpp's two routes: what it sends, the
breakdown it builds from prefix renders, and a one-line error for every way a server can fail.
The real llama-server is checked in tests/server/test_llamacpp_count.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from ctxbudget.budget.context import context_tokens
from ctxbudget.cli.main import main
from ctxbudget.cli.request import request_command
from ctxbudget.errors import ConfigError, ProviderError
from ctxbudget.messages import Message, Request, ToolSpec, Usage
from ctxbudget.messages.openai import request_to_openai
from ctxbudget.providers.llamacpp_count import LlamaCppCounter

from .fakeserver import FakeServer, Recorded, Reply, closed_port

TOOL = ToolSpec(name="read", description="Read a file.", parameters={"type": "object"})


def _render(body: dict[str, Any]) -> str:
    """A toy template: a word per message part; the tools a word each; ``go`` primes a reply."""
    words = [f"<{m['role']}> {m.get('content') or ''}".strip() for m in body["messages"]]
    words += ["tool"] * len(body.get("tools") or [])
    if body.get("add_generation_prompt", True):
        words.append("go")
    return " ".join(words)


def llama_like(recorded: Recorded) -> Reply:
    """llama.cpp's /apply-template and /tokenize, with a whitespace "tokenizer" and a BOS."""
    body = recorded.json()
    if recorded.path == "/apply-template":
        if not body["messages"]:
            return Reply(status=500, body={"error": {"message": "no messages", "code": 500}})
        return Reply(body={"prompt": _render(body)})
    if recorded.path == "/tokenize":
        bos = [1] if body.get("add_special") else []
        return Reply(body={"tokens": bos + [7] * len(body["content"].split())})
    return Reply(status=404, body={"error": {"message": "File Not Found", "code": 404}})


def _request() -> Request:
    return Request(
        system="be brief",
        tools=(TOOL,),
        messages=(
            Message(role="user", content="a b c"),
            Message(role="assistant", content="d e"),
            Message(role="user", content="f"),
        ),
    )


def test_the_total_is_the_servers_render_tokenised_as_a_completion_is() -> None:
    with FakeServer(responder=llama_like) as fake:
        counter = LlamaCppCounter(fake.base_url)  # the /v1 URL: the routes are at the root
        assert counter.count_tokens(_request()) == 1 + len(_render(_body()).split())
    one_call, render, tokenize = fake.requests
    # this server has no one-call count (404): the two routes
    assert [one_call.path, render.path, tokenize.path] == [
        "/v1/chat/completions/input_tokens",
        "/apply-template",
        "/tokenize",
    ]
    assert render.json() == _body()  # the request as it is sent, less model and max_tokens
    assert tokenize.json() == {
        "content": _render(_body()),
        "add_special": True,
        "parse_special": True,
    }


def _body() -> dict[str, Any]:
    return request_to_openai(_request())


def test_count_says_exact_from_the_server_and_its_parts_add_up() -> None:
    with FakeServer(responder=llama_like) as fake:
        counter = LlamaCppCounter(fake.base_url)
        count = counter.count(_request())
        total = counter.count_tokens(_request())
    assert count.kind == "exact"
    assert count.counter == f"llama.cpp:http://127.0.0.1:{fake.port}"
    assert count.total == total
    # head: BOS + "<system> be brief" (3 words) + 1 tool word; without tools 4 tokens
    assert (count.system, count.tools, count.floor) == (4, 1, 5)
    # each message's growth: "<user> a b c" 4, "<assistant> d e" 3, "<user> f" 2 + "go" 1
    assert tuple(count.per_message) == (4, 3, 3)
    assert count.system + count.tools + count.messages == count.total


def test_a_growing_conversation_asks_only_for_its_new_prefixes() -> None:
    request = _request()
    longer = Request(
        system=request.system,
        tools=request.tools,
        messages=(
            *request.messages,
            Message(role="assistant", content="g"),
            Message(role="user", content="h i"),
        ),
    )
    with FakeServer(responder=llama_like) as fake:
        counter = LlamaCppCounter(fake.base_url)
        counter.count(request)
        before = len(fake.requests)
        count = counter.count(longer)
        asked = len(fake.requests) - before
    # the whole request, then the prefixes through message 3 and message 4: 3 renders, 3 tokenises
    assert asked == 6
    assert tuple(count.per_message) == (4, 3, 2, 2, 4)


def test_the_budget_takes_it_as_a_counter_usage_first() -> None:
    """``context_tokens`` (usage-first) with the server as its counter: the usage, then what the
    prompt grows by after the message that carries it."""
    base = _request()
    replied = Message(
        role="assistant", content="d e", usage=Usage(input_tokens=40, output_tokens=2)
    )
    request = Request(
        system=base.system,
        tools=base.tools,
        messages=(base.messages[0], replied, Message(role="user", content="f g h")),
    )
    with FakeServer(responder=llama_like) as fake:
        estimate = context_tokens(request, LlamaCppCounter(fake.base_url))
    assert (estimate.source, estimate.usage_index, estimate.usage_tokens) == ("usage", 1, 42)
    assert estimate.trailing_tokens == 4 + 1  # "<user> f g h" and "go"


def test_a_template_that_cannot_render_the_head_alone_lends_it_to_the_first_message() -> None:
    request = Request(messages=(Message(role="user", content="x y"),))
    with FakeServer(responder=llama_like) as fake:
        count = LlamaCppCounter(f"http://127.0.0.1:{fake.port}").count(request)
    assert (count.system, count.tools, count.total) == (0, 0, 1 + 3 + 1)
    assert tuple(count.per_message) == (5,)


def counting_llama(recorded: Recorded) -> Reply:
    """A recent llama-server: its one-call count of a chat request as well."""
    if recorded.path == "/v1/chat/completions/input_tokens":
        return Reply(body={"input_tokens": 1 + len(_render(recorded.json()).split())})
    return llama_like(recorded)


def test_a_server_that_counts_in_one_call_is_asked_once_a_count() -> None:
    with FakeServer(responder=counting_llama) as fake:
        counter = LlamaCppCounter(fake.base_url)
        one = [counter.count_tokens(_request()) for _ in range(3)]
        assert [r.path for r in fake.requests] == ["/v1/chat/completions/input_tokens"] * 3
        assert fake.requests[0].json() == _body()
        two = LlamaCppCounter(fake.base_url, one_call=False).count_tokens(_request())
        assert [r.path for r in fake.requests[3:]] == ["/apply-template", "/tokenize"]
    assert one == [two] * 3


def test_a_failing_one_call_count_is_not_hidden_by_the_two_routes() -> None:
    refusal = {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}
    with FakeServer(Reply(status=500, body={"error": refusal})) as fake:
        with pytest.raises(ProviderError) as caught:
            LlamaCppCounter(fake.base_url).count_tokens(_request())
        assert len(fake.requests) == 1
    assert "/v1/chat/completions/input_tokens answered HTTP 500" in str(caught.value)


def _error(reply: Reply) -> str:
    with FakeServer(reply) as fake, pytest.raises(ProviderError) as caught:
        LlamaCppCounter(fake.base_url, one_call=False).count_tokens(_request())
    return str(caught.value)


@pytest.mark.parametrize("status", [404, 501])
def test_a_server_without_the_routes_says_so(status: int) -> None:
    said = _error(Reply(status=status, body="Not Found"))
    assert f"/apply-template answered HTTP {status}: not a llama.cpp server" in said
    assert "\n" not in said


def test_a_server_without_jinja_is_told_to_start_with_it() -> None:
    refusal = {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}
    said = _error(Reply(status=500, body={"error": refusal}))
    assert said.endswith("tools param requires --jinja flag; start llama-server with --jinja")


def test_a_reply_that_is_not_json_says_so() -> None:
    said = _error(Reply(body="<html>proxy</html>"))
    assert "/apply-template answered a body that is not a JSON object: <html>proxy</html>" in said


def test_a_reply_without_a_prompt_says_so() -> None:
    assert "/apply-template answered without a prompt" in _error(Reply(body={"content": "x"}))


def test_an_unreachable_server_says_what_to_do() -> None:
    with pytest.raises(ProviderError) as caught:
        LlamaCppCounter(f"http://127.0.0.1:{closed_port()}", timeout=5).count_tokens(_request())
    said = str(caught.value)
    assert "cannot reach the server (ConnectError" in said
    assert said.endswith("start llama-server there or fix the URL")


def test_a_bad_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        LlamaCppCounter("localhost:8080")


def test_the_request_command_counts_with_the_server(tmp_path: Any) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps(_body()), encoding="utf-8")
    with FakeServer(responder=llama_like) as fake:
        result = CliRunner().invoke(
            request_command, [str(body), "--server", fake.base_url, "--json"]
        )
        total = LlamaCppCounter(fake.base_url).count_tokens(_request())
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert (shown["kind"], shown["tokens"]) == ("exact", total)
    assert shown["counter"].startswith("llama.cpp:http://127.0.0.1:")


def _main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    code = info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def test_the_request_command_refuses_a_server_and_a_tokenizer(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps(_body()), encoding="utf-8")
    args = ["request", str(body), "--server", "http://127.0.0.1:1", "--tokenizer", "qwen3"]
    code, err = _main(args, capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        "ctxbudget: --server counts with the server's own template; drop --tokenizer/--model"
    ]


def test_an_unreachable_server_in_the_cli_is_one_line_exit_2(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps(_body()), encoding="utf-8")
    url = f"http://127.0.0.1:{closed_port()}"
    code, err = _main(["request", str(body), "--server", url], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "cannot reach the server" in err
    assert "Traceback" not in err
