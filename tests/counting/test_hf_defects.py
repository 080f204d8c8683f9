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


TINY_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _tiny_folder(root: Path, template: str, change: Callable[[dict[str, Any]], None]) -> Path:
    """A small trained BPE (loads in milliseconds) with ChatML tokens and the Qwen2.5 template;
    ``change`` edits its tokenizer_config.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=list(TINY_SPECIALS), initial_alphabet=alphabet
    )
    tok.train_from_iterator(["List files in the folder", "tool_response a.py b.py"] * 20, trainer)
    root.mkdir(parents=True)
    tok.save(str(root / "tokenizer.json"))
    decoder = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                  "rstrip": False, "single_word": False, "special": True}
        for t in TINY_SPECIALS
    }  # fmt: skip
    config = {"added_tokens_decoder": decoder, "chat_template": template,
              "eos_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast"}  # fmt: skip
    change(config)
    (root / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return root


def test_added_tokens_only_in_tokenizer_config_count_as_transformers(
    qwen25_source: str, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    def add_tool_response(config: dict[str, Any]) -> None:
        for i, text in enumerate(["<tool_response>", "</tool_response>"]):
            config["added_tokens_decoder"][str(300 + i)] = {
                "content": text, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": False,
            }  # fmt: skip

    folder = _tiny_folder(tmp_path / "extra", qwen25_source, add_tool_response)
    plain = _tiny_folder(tmp_path / "plain", qwen25_source, lambda config: None)
    expected = oracle_count(AutoTokenizer.from_pretrained(str(folder)), BODY)
    assert count_request(_request(BODY), f"hf:{folder}").total == expected
    assert count_request(_request(BODY), f"hf:{plain}").total > expected + 2


def test_special_tokens_map_of_a_legacy_folder_counts_as_transformers(
    qwen25_source: str, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    def legacy(config: dict[str, Any]) -> None:
        del config["added_tokens_decoder"]

    template = "{{ bos_token }}" + qwen25_source
    folder = _tiny_folder(tmp_path / "legacy", template, legacy)
    without_map = _tiny_folder(tmp_path / "no-map", template, legacy)
    special_map = {"bos_token": {"content": "<|startoftext|>", "lstrip": False,
                   "normalized": False, "rstrip": False, "single_word": False}}  # fmt: skip
    (folder / "special_tokens_map.json").write_text(json.dumps(special_map), encoding="utf-8")
    expected = oracle_count(AutoTokenizer.from_pretrained(str(folder)), BODY)
    got = count_request(_request(BODY), f"hf:{folder}").total
    assert got == expected
    assert got == count_request(_request(BODY), f"hf:{without_map}").total + 1  # one new token


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
