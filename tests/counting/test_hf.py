"""``hf:PATH``: a model folder the test builds (a trained BPE tokenizer + the Qwen3 template)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from tests.counting.strategies import requests

from ctxbudget.counting import count_request
from ctxbudget.counting.hf import render_template
from ctxbudget.counting.template_input import template_messages, template_tools
from ctxbudget.errors import InputError
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.registry import get_tokenizer

SPECIALS = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<tool_response>", "</tool_response>"]  # fmt: skip


def _build_folder(root: Path, template: str) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = ["The quick brown fox jumps over the lazy dog.", "def main():\n    return 42\n"] * 50
    tok.train_from_iterator(corpus, trainer)
    root.mkdir(parents=True, exist_ok=True)
    tok.save(str(root / "tokenizer.json"))
    config = {"chat_template": template, "eos_token": "<|im_end|>"}
    (root / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, qwen3_source: str) -> Path:
    return _build_folder(tmp_path_factory.mktemp("model") / "tiny", qwen3_source)


@settings(max_examples=40)
@given(request_=requests)
def test_hf_count_is_the_folder_tokenizer_on_the_rendered_template(
    request_: Request, folder: Path, qwen3_source: str
) -> None:
    name = f"hf:{folder}"
    text = render_template(qwen3_source, template_messages(request_), template_tools(request_))
    count = count_request(request_, name)
    assert count.total == len(get_tokenizer(name).encode(text, special=True))
    assert count.system + count.tools + count.messages == count.total
    assert sum(count.per_message) == count.messages
    assert len(count.per_message) == len(request_.messages)


def test_hf_attribution_matches_the_native_split(folder: Path) -> None:
    request = Request(
        system="Be brief.",
        messages=(Message(role="user", content="Hello"), Message(role="assistant", content="Hi")),
    )
    count = count_request(request, f"hf:{folder}")
    tok = get_tokenizer(f"hf:{folder}")
    system_turn = "<|im_start|>system\nBe brief.<|im_end|>\n"
    assert count.system == len(tok.encode(system_turn, special=True))
    assert count.per_message[0] == len(
        tok.encode("<|im_start|>user\nHello<|im_end|>\n", special=True)
    )


def test_chat_template_jinja_file_wins(tmp_path: Path, qwen3_source: str) -> None:
    root = _build_folder(tmp_path / "m", qwen3_source)
    (root / "chat_template.jinja").write_text("{{ 'X' }}", encoding="utf-8")
    count = count_request(Request(messages=(Message(role="user", content="hi"),)), f"hf:{root}")
    assert count.total == len(get_tokenizer(f"hf:{root}").encode("X"))


@pytest.mark.parametrize(
    "template",
    [
        "{{ messages.__class__.__mro__ }}",
        "{{ ''.__class__.__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ raise_exception('nope') }}",
        "{% for %}",
    ],
)
def test_hostile_or_broken_templates_are_one_line_input_errors(
    tmp_path: Path, template: str
) -> None:
    root = _build_folder(tmp_path / "evil", template)
    with pytest.raises(InputError) as info:
        count_request(Request(messages=(Message(role="user", content="hi"),)), f"hf:{root}")
    assert "\n" not in str(info.value)


def test_folder_without_template_says_how_to_fix(tmp_path: Path) -> None:
    root = _build_folder(tmp_path / "bare", "x")
    (root / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(InputError, match="chat_template"):
        count_request(Request(messages=(Message(role="user", content="hi"),)), f"hf:{root}")


def test_packaged_qwen35_template_is_the_shared_one(templates_dir: Path) -> None:
    from ctxbudget.counting.hf import packaged_template

    assert packaged_template("qwen3.5.jinja") == (templates_dir / "qwen3.5.jinja").read_text(
        encoding="utf-8"
    )
