"""A Llama-3-style model folder for the server tier: the stored cl100k_base tokenizer with Llama
3's pre-tokenizer (llama.cpp's ``llama-bpe``) and special tokens, and a chat template of the same
shape written here (tools included, several tool calls per turn, which Llama 3.2's own refuses)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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


def write_llama3_folder(stored: Path, target: Path) -> Path:
    """``stored``'s tokenizer.json (tests/data/hf/llama3-cl100k: cl100k_base with Llama 3's
    pre-tokenizer and special tokens) with this module's template, in ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(stored / "tokenizer.json", target / "tokenizer.json")
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "add_bos_token": False,  # the template writes it
        "chat_template": TEMPLATE,
        "model_max_length": 131072,
    }
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=1), "utf-8")
    return target
