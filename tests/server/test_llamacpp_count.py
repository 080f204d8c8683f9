"""Counting that follows a real llama.cpp server: ``LlamaCppCounter`` asks the server to render
(``/apply-template``) and tokenise (``/tokenize``) and equals its ``usage.prompt_tokens`` on
every request, SmolLM3 with tools included, where llama.cpp's Jinja engine prints the tools
apart from transformers' (see ``test_smollm3_tools_print_apart_from_transformers``)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from llama_harness import LlamaServer
from test_count import TOOLS, generated_request

from ctxbudget.cli.request import request_command
from ctxbudget.counting import RequestCounter
from ctxbudget.counting.hf import load_folder_template, render_template
from ctxbudget.counting.template_input import template_messages, template_tools
from ctxbudget.messages.model import Request, ToolSpec
from ctxbudget.messages.openai import request_to_openai
from ctxbudget.providers.llamacpp_count import LlamaCppCounter
from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

pytestmark = pytest.mark.server

WITH_TOOLS = 24
"""Generated requests with tools sent to the SmolLM3 server (the issue saw 7 of 12 apart)."""

# Tools as real ones are written: a description over two lines, a Windows path, both quotes, a
# tab, a no-break space, a float in a schema. Each prints apart under ``tool | string``.
PRINTED_APART = (
    ToolSpec(
        name="run_shell",
        description="Run a shell command.\nOutput over 10 KB is cut.",
        parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
    ),
    ToolSpec(
        name="write_file",
        description="Write a file; Windows paths (C:\\work\\out.txt) work.",
        parameters={
            "type": "object",
            "properties": {"mode": {"type": "string", "description": "'w' or \"a\"\tonly"}},
        },
    ),
    ToolSpec(
        name="sample",
        description="Sample with a temperature\u00a0(0-2).",
        parameters={"type": "number", "minimum": 0.0, "maximum": 2.0, "default": 1e-05},
    ),
)
POOL = (*TOOLS, *PRINTED_APART)


def _with_tools(count: int) -> list[Request]:
    """The generated requests that carry tools, each with 1-3 tools drawn from ``POOL``."""
    out = []
    seed = 0
    while len(out) < count:
        request = generated_request(seed)
        if request.tools:
            tools = random.Random(seed).sample(POOL, random.Random(-seed).randint(1, 3))
            out.append(dataclasses.replace(request, tools=tuple(tools)))
        seed += 1
    return out


def llamacpp_repr(value: object) -> str:
    """How llama.cpp's Jinja engine prints a value inside a mapping or list under ``| string``
    (common/jinja/value.cpp ``value_to_string_repr``; value.h ``value_object_t::as_string``,
    ``value_array_t::as_string``, ``value_float_t::as_string``): a string with no ``'`` between
    single quotes, unescaped; one with ``'`` as JSON (only ``"``, ``\\`` and control characters
    escaped); a float as C++ ``std::to_string`` with trailing zeros cut; the rest as Python."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if "'" in value else f"'{value}'"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{llamacpp_repr(k)}: {llamacpp_repr(v)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(llamacpp_repr(v) for v in value) + "]"
    if isinstance(value, float):
        fixed = f"{value:f}".rstrip("0")
        return fixed + "0" if fixed.endswith(".") else fixed
    return repr(value)


def _prompt_tokens(server: LlamaServer, requests: list[Request]) -> list[int]:
    provider = OpenAICompatibleProvider(base_url=server.base_url, model="tiny", api_key_env=None)
    return [provider.complete(r).usage.input_tokens for r in requests]


@pytest.fixture(scope="module")
def smollm3_served(smollm3_server: LlamaServer) -> list[tuple[Request, int]]:
    requests = _with_tools(WITH_TOOLS)
    return list(zip(requests, _prompt_tokens(smollm3_server, requests), strict=True))


def test_smollm3_with_tools_the_server_count_equals_prompt_tokens(
    smollm3_server: LlamaServer, smollm3_served: list[tuple[Request, int]]
) -> None:
    """Through the server's one-call count, through /apply-template + /tokenize, and as the
    total of the breakdown (whose parts add up to it)."""
    one_call = LlamaCppCounter(smollm3_server.base_url)
    two_routes = LlamaCppCounter(smollm3_server.base_url, one_call=False)
    wrong = []
    for i, (sent, real) in enumerate(smollm3_served):
        whole = one_call.count(sent)
        counts = (one_call.count_tokens(sent), two_routes.count_tokens(sent), whole.total)
        if counts != (real,) * 3 or sum(whole.per_message) != whole.messages:
            wrong.append((i, real, counts))
    assert len(smollm3_served) >= 12
    assert wrong == [], f"{len(wrong)} of {len(smollm3_served)} differ (i, server, counts)"


def test_smollm3_with_tools_the_hf_count_is_transformers_not_the_server(
    smollm3_server: LlamaServer,
    smollm3_folder: Path,
    smollm3_served: list[tuple[Request, int]],
) -> None:
    """Why a llama.cpp upstream needs its own count: the folder's count (transformers' render)
    is off the server's on the requests whose tools print apart, above it where Python escapes
    more (a newline, a backslash) and below where llama.cpp's JSON quoting does."""
    counting = RequestCounter(f"hf:{smollm3_folder}")
    over = [counting.count(sent).total - real for sent, real in smollm3_served]
    assert any(over), "the SmolLM3 tools now render alike in llama.cpp: update the README"


def test_smollm3_tools_print_apart_from_transformers(
    smollm3_server: LlamaServer, smollm3_folder: Path
) -> None:
    """The one construct that renders apart: ``(tool | string)`` on a mapping. Python's Jinja
    prints ``str(dict)``, a string's repr in it (escapes such as ``\\n``, ``\\\\``, ``\\xa0``;
    ``'it\\'s "x"'``); llama.cpp prints ``llamacpp_repr`` (above). All else renders alike."""
    counter = LlamaCppCounter(smollm3_server.base_url)
    template = load_folder_template(str(smollm3_folder))
    apart = 0
    for request in _with_tools(WITH_TOOLS):
        tools = template_tools(request)
        assert tools is not None
        ours = render_template(
            template.source(tools=True),
            template_messages(request),
            tools=tools,
            add_generation_prompt=True,
            **dict(template.variables),
        )
        theirs = counter.prompt(request)
        python_lines = "".join(f"{tool}\n" for tool in tools)
        llamacpp_lines = "".join(f"{llamacpp_repr(tool)}\n" for tool in tools)
        assert python_lines in ours
        assert ours.replace(python_lines, llamacpp_lines) == theirs
        apart += ours != theirs
    assert apart > 0


def test_qwen_the_server_count_equals_prompt_tokens(qwen_server: LlamaServer) -> None:
    requests = [generated_request(seed) for seed in range(40)]
    counter = LlamaCppCounter(qwen_server.base_url)
    served = _prompt_tokens(qwen_server, requests)
    assert [counter.count_tokens(r) for r in requests] == served


def test_the_request_command_counts_with_the_server(
    smollm3_server: LlamaServer, smollm3_served: list[tuple[Request, int]], tmp_path: Path
) -> None:
    body = tmp_path / "body.json"
    for sent, real in smollm3_served[:4]:
        body.write_text(json.dumps(request_to_openai(sent)), encoding="utf-8")
        args = [str(body), "--server", smollm3_server.base_url, "--json"]
        result = CliRunner().invoke(request_command, args)
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        assert (shown["tokens"], shown["kind"]) == (real, "exact")
