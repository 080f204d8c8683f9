"""``hf:PATH`` equals transformers' ``apply_chat_template`` on every model folder the repo carries.

Each folder gets 110 generated conversations (without a system message, with an empty one
(>= 10, checked) or with text); each is sent as a request after every user turn
(>= 200 requests per folder, checked), and each request is counted by ``count_request`` with the
folder as tokenizer, by one ``RequestCounter(model=...)`` step after step, and by both Jinja
paths (message loop memoised, whole render) even where the folder's template is counted
natively; the whole conversation also through the CLI with ``--tokenizer`` and with ``--model``.
The oracle is transformers 4.x.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.counting.conftest import HF_FOLDERS
from tests.counting.hf_oracle import bodies, oracle_count, run_cli

from ctxbudget.counting import RequestCount, RequestCounter, count_request
from ctxbudget.counting.counter import count_with
from ctxbudget.counting.hf import load_folder_template
from ctxbudget.counting.template_count import TemplateScheme
from ctxbudget.errors import InputError
from ctxbudget.messages.detect import parse_request_json
from ctxbudget.messages.model import Request
from ctxbudget.tokens.registry import get_tokenizer

Oracle = Callable[[str], tuple[Path, Any]]


def _jinja_scheme(name: str, memoise_loop: bool) -> TemplateScheme:
    """A Jinja path even for a folder counted natively by default: the message loop memoised,
    or the general one (one whole render, pieces)."""
    folder = load_folder_template(name[len("hf:") :])
    tokenizer = get_tokenizer(name)
    return TemplateScheme(
        name=name, template=folder, tokenizer=tokenizer, memoise_loop=memoise_loop
    )


def _prefixes(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The body and each earlier point where a request would be sent: after a user turn, and
    after the last tool result of a batch (an agent's step)."""
    messages = body["messages"]
    cuts = [
        i + 1
        for i, m in enumerate(messages[:-1])
        if m["role"] == "user" or (m["role"] == "tool" and messages[i + 1]["role"] != "tool")
    ]
    return [{**body, "messages": messages[:cut]} for cut in cuts] + [body]


def _library(name: str, bodies: list[dict[str, Any]]) -> list[tuple[int | None, ...]]:
    """Each body counted three ways; the RequestCounter counts them in order (incremental)."""
    counter = RequestCounter(model=name)
    out = []
    for body in bodies:
        request = parse_request_json(json.dumps(body), "body")
        doors: list[Callable[[Request], RequestCount]] = [
            lambda r: count_request(r, name),
            counter.count,
            lambda r: count_with(_jinja_scheme(name, True), r),
            lambda r: count_with(_jinja_scheme(name, False), r),
        ]
        counts: list[int | None] = []
        for door in doors:
            try:
                counts.append(door(request).total)
            except InputError:
                counts.append(None)
        out.append(tuple(counts))
    return out


def _cli(flag: str, name: str, body: dict[str, Any], path: Path) -> int | None:
    path.write_text(json.dumps(body), encoding="utf-8")
    code, out, err = run_cli(["request", str(path), "--json", flag, name])
    if code == 2:  # the template refused the request, as transformers did
        assert len(err.strip().splitlines()) == 1, err
        return None
    assert code == 0, err
    tokens: int = json.loads(out)["tokens"]
    return tokens


@pytest.mark.parametrize("folder", HF_FOLDERS)
def test_every_door_counts_what_transformers_counts(
    folder: str, hf_oracle: Oracle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path, tokenizer = hf_oracle(folder)
    name = f"hf:{path}"
    body_file = tmp_path_factory.mktemp("oracle") / "body.json"
    seen = []
    empty_systems = []  # bodies with an empty system message: an empty turn, not none

    @settings(
        max_examples=110, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(body=bodies())
    def check(body: dict[str, Any]) -> None:
        requests = _prefixes(body)
        expected = [oracle_count(tokenizer, b) for b in requests]
        assert _library(name, requests) == [(n, n, n, n) for n in expected], body
        assert _cli("--tokenizer", name, body, body_file) == expected[-1], body
        assert _cli("--model", name, body, body_file) == expected[-1], body
        seen.extend(expected)
        empty_systems.append(body["messages"][0] == {"role": "system", "content": ""})

    check()
    assert len(seen) >= 200 and sum(n is not None for n in seen) >= 150  # Llama refuses some
    assert sum(empty_systems) >= 10


def test_tool_results_that_meet_without_a_token_are_joined_not_rendered_whole(
    hf_oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hermes-2-Pro's tool_use template ends a result with ``</tool_response>\\n`` and starts
    the next with ``<tool_response>``: no added token between, so the two are counted as one
    text. The loop stays memoised: after the first count no step renders the whole prompt."""
    path, tokenizer = hf_oracle("hermes-2-pro-template")
    name = f"hf:{path}"
    renders = [0]
    original = TemplateScheme.render

    def counted(self: TemplateScheme, *args: Any, **kwargs: Any) -> str:
        renders[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TemplateScheme, "render", counted)
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    read = {"name": "read", "description": "Read a file.", "parameters": schema}
    tool = {"type": "function", "function": read}
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "read", "arguments": '{"path": "a"}'},
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read both."}]
    counter = RequestCounter(name)
    per_step = []
    for i in range(6):
        messages.append({"role": "assistant", "content": "", "tool_calls": [call, call]})
        messages += [
            {"role": "tool", "tool_call_id": "c", "content": f"part {i}.{j}"} for j in (1, 2)
        ]
        body = json.loads(json.dumps({"messages": messages, "tools": [tool]}))  # a fresh copy
        before = renders[0]
        got = counter.count(parse_request_json(json.dumps(body), "body"))
        per_step.append(renders[0] - before)
        assert got.total == oracle_count(tokenizer, body)
        assert sum(got.per_message) == got.messages
    assert per_step[1:] == [0] * 5


@pytest.mark.parametrize("with_tools", [False, True])
@pytest.mark.parametrize("folder", HF_FOLDERS)
def test_an_empty_system_message_counts_what_transformers_counts(
    folder: str, with_tools: bool, hf_oracle: Oracle
) -> None:
    """An empty system message is an empty system turn, not none: Qwen2.5 renders it empty
    where it renders its default prompt for none (14 tokens against 30 without tools)."""
    path, tokenizer = hf_oracle(folder)
    name = f"hf:{path}"
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = {"type": "function", "function": {"name": "w", "description": "", "parameters": schema}}
    user = {"role": "user", "content": "hi"}
    counted = []
    for messages in ([{"role": "system", "content": ""}, user], [user]):
        body: dict[str, Any] = {"messages": messages, **({"tools": [tool]} if with_tools else {})}
        request = parse_request_json(json.dumps(body), "body")
        expected = oracle_count(tokenizer, body)
        assert RequestCounter(name).count(request).total == expected, messages
        assert _library(name, [body]) == [(expected,) * 4], messages
        counted.append(expected)
    if folder == "qwen2.5" and not with_tools:
        assert counted == [14, 30]  # transformers 4.57's apply_chat_template(tokenize=True)
