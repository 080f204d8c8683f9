"""Build the estimator samples of JSON of other shapes: manifests, schemas, tool calls, API replies.

    .venv/bin/python scripts/json_samples.py --write tests/data/estimators   # (re)write them
    .venv/bin/python scripts/json_samples.py                                 # print sizes only

Each shape is written twice, pretty-printed (``json.dumps(indent=2)``) and
minified (``separators=(",", ":")``, what an agent sends as tool arguments), ``SAMPLE_CHARS``
characters each at most, one JSON document per line (minified) or per block (pretty):

- manifest : ``package.json`` of the packages bundled with npm (``/usr/lib/node_modules/npm``,
             npm 11.19.1 from nodesource's nodejs 20.20.2 here), permissive licences only
             (``LICENCES``), packages in sorted order, every ``MANIFEST_STRIDE``-th.
- schema   : JSON Schema documents shipped in site-packages: the metaschemas of
             ``jsonschema_specifications`` (drafts 3 to 2020-12) and the Swagger 2.0 schema with
             its petstore instance in ``jsonschema/benchmarks/issue232/issue.json`` (both MIT),
             those two cut into one document per definition, path, ... (``_pieces``).
- tool_args: the arguments of every tool call recorded in the MIT-licensed traces of
             ``tests/data/traces`` (Claude Code ``tool_use`` inputs, Codex ``function_call``
             arguments), in recorded order.
- records  : record-shaped data (arrays of small objects with short string values, like a code
             table or a CSV export): pages of ``RECORDS_PER_PAGE`` records, in turn the time zones
             of tzdata's ``zone1970.tab`` with their countries' names from ``iso3166.tab`` (the
             ``tzdata`` package in site-packages; the tables are public domain) and the
             characters U+0020..U+1FFF, every ``CHAR_STRIDE``-th, with their ``unicodedata``
             name, category, bidi class and East Asian width (Python's own Unicode database).
- api      : API replies: the Anthropic Messages responses Claude Code recorded (its trace's
             ``message`` objects, as received), and OpenAI Chat Completions / Responses objects
             built around each Codex turn (its real text, tool calls and ``last_token_usage``);
             only the ids, ``created`` and fingerprints of those are generated (seeded, ``SEED``).

All of it is real text not written for the purpose; only the OpenAI envelope is generated, in the
shape of the providers' published examples. Kinds ``json_<shape>_pretty`` / ``json_<shape>_min``.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import sysconfig
import unicodedata
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "tests" / "data" / "traces"
CLAUDE_TRACE = TRACES / "claude-code_guideai-session-processing_claude-code-sample-1.jsonl"
CODEX_TRACE = TRACES / "codex-cli_guideai-session-processing_sample-codex-session.jsonl"
NPM_MODULES = Path("/usr/lib/node_modules/npm/node_modules")
SITE = Path(sysconfig.get_paths()["purelib"])
SCHEMA_FILES = (
    *(f"jsonschema_specifications/schemas/{d}/metaschema.json" for d in ("draft3", "draft4")),
    *(f"jsonschema_specifications/schemas/{d}/metaschema.json" for d in ("draft6", "draft7")),
    "jsonschema_specifications/schemas/draft201909/metaschema.json",
    "jsonschema_specifications/schemas/draft202012/metaschema.json",
    "jsonschema/benchmarks/issue232/issue.json",
)
LICENCES = ("MIT", "ISC", "BSD-2-Clause", "BSD-3-Clause", "Apache-2.0", "BlueOak-1.0.0")
TZ_TABLES = SITE / "tzdata" / "zoneinfo"
SHAPES = ("manifest", "schema", "tool_args", "records", "api")
FORMS = ("pretty", "min")
JSON_KINDS = tuple(f"json_{shape}_{form}" for shape in SHAPES for form in FORMS)
"""The kinds this script writes, in the order the tests and the bench report them."""
SAMPLE_CHARS = 24_000
MANIFEST_STRIDE = 3
PIECE_CHARS = 3000
RECORDS_PER_PAGE = 8
CHAR_STRIDE = 7
SEED = 30  # issue 30: the generated ids are the same on every run


def _pretty(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _minified(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n"


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def manifests() -> list[object]:
    """npm's bundled ``package.json`` files under a permissive licence, sorted, strided."""
    found = []
    for path in sorted(NPM_MODULES.glob("**/package.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("license") in LICENCES:
            found.append(data)
    return found[::MANIFEST_STRIDE]


def _pieces(document: object) -> list[object]:
    """``document``, or if it is over ``PIECE_CHARS`` minified, one document per entry of each
    of its objects (``{"definitions": {"info": ...}}``): a sample takes whole documents."""
    if len(_minified(document)) <= PIECE_CHARS or not isinstance(document, dict):
        return [document]
    out: list[object] = []
    for key, value in document.items():
        if isinstance(value, dict) and len(_minified(value)) > PIECE_CHARS:
            out += [{key: {k: v}} for k, v in value.items()]
        else:
            out.append({key: value})
    return out


def schemas() -> list[object]:
    """The metaschemas, then the Swagger 2.0 schema and its petstore instance, in pieces."""
    documents: list[object] = []
    for name in SCHEMA_FILES:
        data = json.loads((SITE / name).read_text(encoding="utf-8"))
        if isinstance(data, list):  # issue232: a test group, its schema and its instances
            for group in data:
                documents += _pieces(group["schema"])
                for test in group["tests"]:
                    documents += _pieces(test["data"])
        else:
            documents.append(data)
    return documents


def tool_arguments() -> list[object]:
    """Each recorded tool call's arguments, Claude Code's then Codex's."""
    found: list[object] = []
    for record in _jsonl(CLAUDE_TRACE):
        message = record.get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            found += [b["input"] for b in message["content"] if b.get("type") == "tool_use"]
    for record in _jsonl(CODEX_TRACE):
        payload = record.get("payload", {})
        if record["type"] == "response_item" and payload.get("type") == "function_call":
            found.append(json.loads(payload["arguments"]))
    return found


def _tab(name: str) -> list[list[str]]:
    """The rows of one of tzdata's tab-separated tables, comments left out."""
    text = (TZ_TABLES / name).read_text(encoding="utf-8")
    return [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]


def _zone_records() -> list[dict[str, object]]:
    """One record per time zone of zone1970.tab, its countries named as iso3166.tab names them."""
    countries = dict(_tab("iso3166.tab"))
    records: list[dict[str, object]] = []
    for codes, coordinates, zone, *comment in _tab("zone1970.tab"):
        records.append(
            {
                "zone": zone,
                "country_codes": codes.split(","),
                "countries": [countries[c] for c in codes.split(",")],
                "coordinates": coordinates,
                "comment": comment[0] if comment else None,
            }
        )
    return records


def _character_records() -> list[dict[str, object]]:
    """One record per named character of U+0020..U+1FFF, every ``CHAR_STRIDE``-th."""
    records: list[dict[str, object]] = []
    for point in range(0x20, 0x2000, CHAR_STRIDE):
        char = chr(point)
        if name := unicodedata.name(char, ""):
            records.append(
                {
                    "code_point": f"U+{point:04X}",
                    "name": name,
                    "category": unicodedata.category(char),
                    "bidi": unicodedata.bidirectional(char),
                    "east_asian_width": unicodedata.east_asian_width(char),
                }
            )
    return records


def records() -> list[object]:
    """Pages of ``RECORDS_PER_PAGE`` records: zone pages and character pages in turn."""
    pages: list[list[list[dict[str, object]]]] = []
    for table in (_zone_records(), _character_records()):
        n = RECORDS_PER_PAGE
        pages.append([table[i : i + n] for i in range(0, len(table), n)])
    mixed: list[object] = []
    for i in range(max(map(len, pages))):
        mixed += [p[i] for p in pages if i < len(p)]
    return mixed


def _token(rng: random.Random, size: int, alphabet: str) -> str:
    return "".join(rng.choice(alphabet) for _ in range(size))


_B62 = string.ascii_letters + string.digits


def _codex_turns() -> Iterator[tuple[str, list[dict[str, Any]], dict[str, int]]]:
    """(timestamp, output items, usage) of each Codex model turn: the items it returned (text
    messages and function calls) and the ``last_token_usage`` reported after them."""
    items: list[dict[str, Any]] = []
    stamp = ""
    for record in _jsonl(CODEX_TRACE):
        payload = record.get("payload", {})
        kind = payload.get("type")
        if record["type"] == "response_item" and kind == "function_call":
            items.append(payload)
        elif record["type"] == "response_item" and kind == "message":
            if payload.get("role") == "assistant":
                items.append(payload)
        elif kind == "token_count" and payload.get("info") and items:
            yield stamp or record["timestamp"], items, payload["info"]["last_token_usage"]
            items, stamp = [], ""
        if items and not stamp:
            stamp = record["timestamp"]


def _chat_completion(
    rng: random.Random, stamp: str, items: list[dict[str, Any]], usage: dict[str, int]
) -> dict[str, Any]:
    """An OpenAI Chat Completions response holding one Codex turn."""
    text = "".join(c.get("text", "") for i in items if i["type"] == "message" for c in i["content"])
    calls = [
        {
            "id": f"call_{_token(rng, 24, _B62)}",
            "type": "function",
            "function": {"name": i["name"], "arguments": i["arguments"]},
        }
        for i in items
        if i["type"] == "function_call"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{_token(rng, 29, _B62)}",
        "object": "chat.completion",
        "created": int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()),
        "model": "gpt-5-codex",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage["input_tokens"],
            "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["total_tokens"],
            "prompt_tokens_details": {"cached_tokens": usage["cached_input_tokens"]},
            "completion_tokens_details": {"reasoning_tokens": usage["reasoning_output_tokens"]},
        },
        "service_tier": "default",
        "system_fingerprint": f"fp_{_token(rng, 10, '0123456789abcdef')}",
    }


def _responses_object(
    rng: random.Random, stamp: str, items: list[dict[str, Any]], usage: dict[str, int]
) -> dict[str, Any]:
    """An OpenAI Responses API object holding one Codex turn (its items as output)."""
    output = []
    for item in items:
        if item["type"] == "function_call":
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{_token(rng, 48, '0123456789abcdef')}",
                    "call_id": item["call_id"],
                    "name": item["name"],
                    "arguments": item["arguments"],
                    "status": "completed",
                }
            )
        else:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{_token(rng, 48, '0123456789abcdef')}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "annotations": [], "text": c.get("text", "")}
                        for c in item["content"]
                    ],
                }
            )
    created = int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    return {
        "id": f"resp_{_token(rng, 48, '0123456789abcdef')}",
        "object": "response",
        "created_at": created,
        "status": "completed",
        "model": "gpt-5-codex",
        "output": output,
        "parallel_tool_calls": False,
        "usage": {
            "input_tokens": usage["input_tokens"],
            "input_tokens_details": {"cached_tokens": usage["cached_input_tokens"]},
            "output_tokens": usage["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": usage["reasoning_output_tokens"]},
            "total_tokens": usage["total_tokens"],
        },
    }


def api_responses() -> list[object]:
    """Claude Code's recorded Anthropic responses, then OpenAI objects around Codex's turns."""
    found: list[object] = []
    for record in _jsonl(CLAUDE_TRACE):
        message = record.get("message")
        if isinstance(message, dict) and message.get("type") == "message":
            found.append(message)
    rng = random.Random(SEED)
    for n, turn in enumerate(_codex_turns()):
        found.append((_chat_completion if n % 2 == 0 else _responses_object)(rng, *turn))
    return found


def _take(texts: list[str], limit: int) -> str:
    """Whole documents, spread evenly over ``texts``, in order, up to ``limit`` characters."""
    total = sum(map(len, texts))
    stride = max(1, round(total / limit))
    picked: list[str] = []
    size = 0
    for start in range(stride):  # a second pass from the next offset fills what is left
        for text in texts[start::stride]:
            if size + len(text) <= limit:
                picked.append(text)
                size += len(text)
        if size > limit * 0.9:
            break
    return "".join(picked)


def build(kind: str, limit: int = SAMPLE_CHARS) -> str:
    """The sample text of one of ``JSON_KINDS``."""
    shape, form = kind.removeprefix("json_").rsplit("_", 1)
    documents = {
        "manifest": manifests,
        "schema": schemas,
        "tool_args": tool_arguments,
        "records": records,
        "api": api_responses,
    }[shape]()
    if not documents:  # e.g. no npm here: never write an empty sample over a real one
        raise SystemExit(f"{kind}: no documents found; see scripts/json_samples.py for sources")
    write = _pretty if form == "pretty" else _minified
    return _take([write(d) for d in documents], limit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the samples into this folder")
    parser.add_argument("--chars", type=int, default=SAMPLE_CHARS, help="characters per kind")
    args = parser.parse_args(argv)
    for kind in JSON_KINDS:
        text = build(kind, args.chars)
        print(f"{kind:22} {len(text):7} chars")
        if args.write:
            (args.write / f"{kind}.txt").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
