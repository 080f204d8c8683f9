"""The five ``hf:`` defects of issue 11, each against transformers on a real-template folder."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from tests.counting.hf_oracle import oracle_count, run_cli

from ctxbudget.cli.request import request_command
from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.hf import render_template
from ctxbudget.messages.detect import parse_request_json
from ctxbudget.tokens.registry import QWEN25_SPECIAL, get_tokenizer

Oracle = Callable[[str], tuple[Path, Any]]
TOOL = {"type": "function", "function": {"name": "ls", "description": "List a folder.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}  # fmt: skip
BODY = {
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "List files 数据 🙂"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
    ],
    "tools": [TOOL],
}  # fmt: skip


def _request(body: dict[str, Any]) -> Any:
    return parse_request_json(json.dumps(body), "body")


def test_model_hf_path_reads_the_folder_whatever_its_name(
    hf_oracle: Oracle, tmp_path: Path
) -> None:
    source, tokenizer = hf_oracle("qwen2.5")
    folder = shutil.copytree(source, tmp_path / "gpt-oss")  # the name once picked o200k
    expected = oracle_count(tokenizer, BODY)
    name = f"hf:{folder}"
    assert count_request(_request(BODY), model=name).total == expected
    counter = RequestCounter(model=name)
    assert counter.name == name and counter.count(_request(BODY)).total == expected
    body_file = tmp_path / "body.json"
    body_file.write_text(json.dumps(BODY), encoding="utf-8")
    out = CliRunner().invoke(request_command, [str(body_file), "--json", "--model", name])
    assert out.exit_code == 0 and json.loads(out.output)["tokens"] == expected


def test_named_templates_use_tool_use_with_tools(hf_oracle: Oracle) -> None:
    folder, tokenizer = hf_oracle("hermes-2-pro-template")
    with_tools = count_request(_request(BODY), f"hf:{folder}")
    as_default = count_request(_request(BODY), f"hf:{folder}", template=f"hf:{folder}#default")
    assert with_tools.total == oracle_count(tokenizer, BODY)
    assert with_tools.total > as_default.total + 100  # the tool_use prompt lists the tools
    no_tools = {"messages": BODY["messages"][:2]}
    assert count_request(_request(no_tools), f"hf:{folder}").total == oracle_count(
        tokenizer, no_tools
    )


def test_generation_tag_renders_its_body(hf_oracle: Oracle) -> None:
    template = (
        "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    )
    assert render_template(template, [{"role": "user", "content": "hi"}]) == "[hi]"
    folder, tokenizer = hf_oracle("smollm3-template")  # its real template uses the tag
    assert count_request(_request(BODY), f"hf:{folder}").total == oracle_count(tokenizer, BODY)


def _with_config(source: Path, target: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    folder = shutil.copytree(source, target)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    change(config)
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_added_tokens_only_in_tokenizer_config_count_as_transformers(
    hf_oracle: Oracle, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    source, _ = hf_oracle("qwen2.5")

    def add_tool_response(config: dict[str, Any]) -> None:
        for i, text in enumerate(["<tool_response>", "</tool_response>"]):
            config["added_tokens_decoder"][str(151665 + i)] = {
                "content": text, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": False,
            }  # fmt: skip

    folder = _with_config(source, tmp_path / "extra", add_tool_response)
    expected = oracle_count(AutoTokenizer.from_pretrained(str(folder)), BODY)
    assert count_request(_request(BODY), f"hf:{folder}").total == expected
    plain = count_request(_request(BODY), f"hf:{source}").total
    assert plain - expected == 5  # issue 11: a Qwen2.5 server is 5 tokens apart per result


def test_special_tokens_map_of_a_legacy_folder_counts_as_transformers(
    hf_oracle: Oracle, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    source, _ = hf_oracle("qwen2.5")

    def legacy(config: dict[str, Any]) -> None:
        del config["added_tokens_decoder"]
        config["chat_template"] = "{{ bos_token }}" + config["chat_template"]

    folder = _with_config(source, tmp_path / "legacy", legacy)
    special_map = {"bos_token": {"content": "<|startoftext|>", "lstrip": False,
                   "normalized": False, "rstrip": False, "single_word": False}}  # fmt: skip
    (folder / "special_tokens_map.json").write_text(json.dumps(special_map), encoding="utf-8")
    expected = oracle_count(AutoTokenizer.from_pretrained(str(folder)), BODY)
    got = count_request(_request(BODY), f"hf:{folder}").total
    assert got == expected
    assert got == count_request(_request(BODY), f"hf:{source}").total + 1  # one new token


def test_builtin_qwen25_is_qwen25(hf_oracle: Oracle) -> None:
    _, tokenizer = hf_oracle("qwen2.5")
    assert max(QWEN25_SPECIAL.values()) == 151664
    assert "<tool_response>" not in QWEN25_SPECIAL and "<think>" not in QWEN25_SPECIAL
    assert len(get_tokenizer("qwen2.5").encode("<tool_response>", special=True)) == 4
    results = [{"role": "tool", "tool_call_id": "c1", "content": f"r{i}"} for i in range(3)]
    body = {**BODY, "messages": [*BODY["messages"], *results]}
    for model in ("qwen2.5", "Qwen/Qwen2.5-7B-Instruct"):
        counted = count_request(_request(body), model=model)
        assert counted.counter == "qwen2.5" and counted.total == oracle_count(tokenizer, body)


def test_a_request_transformers_refuses_is_one_line_exit_2(
    hf_oracle: Oracle, tmp_path: Path
) -> None:
    folder, tokenizer = hf_oracle("llama3-cl100k")
    two_calls = [{"id": f"c{i}", "type": "function",
                  "function": {"name": "ls", "arguments": "{}"}} for i in (1, 2)]  # fmt: skip
    messages = [
        *BODY["messages"][:2],
        {"role": "assistant", "content": None, "tool_calls": two_calls},
    ]
    body = {**BODY, "messages": messages}
    assert oracle_count(tokenizer, body) is None  # "only supports single tool-calls at once"
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    code, out, err = run_cli(["request", str(path), "--model", f"hf:{folder}"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "only supports single tool-calls at once" in err
