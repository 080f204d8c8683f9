"""What a Hugging Face model folder says about its tokens besides ``tokenizer.json``.

transformers 4.x reads ``tokenizer_config.json`` (``added_tokens_decoder``, ``bos_token`` ...,
``additional_special_tokens``, ``extra_special_tokens``) and, only when that config has no
``added_tokens_decoder``, ``special_tokens_map.json``; this module reads them the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbudget.errors import InputError

# transformers 4.57 tokenization_utils_base.SPECIAL_TOKENS_ATTRIBUTES, in its order.
SPECIAL_ATTRIBUTES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclass(frozen=True, slots=True)
class TokenSpec:
    """One added token as transformers' ``AddedToken`` holds it."""

    content: str
    special: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool | None = None
    """``None``: the ``tokenizers`` default (``not special``)."""


@dataclass(frozen=True, slots=True)
class FolderTokens:
    """The token facts of a model folder, as transformers' tokenizer ``__init__`` uses them."""

    added: tuple[TokenSpec, ...] = ()
    """``added_tokens_decoder`` in id order (or ``tokenizer.json``'s, for a legacy folder)."""
    specials: tuple[tuple[str, TokenSpec | str], ...] = ()
    """Named special tokens (``bos_token`` ...) in transformers' order, extra ones after."""
    additional: tuple[TokenSpec | str, ...] = ()
    """``additional_special_tokens``."""
    split_special_tokens: bool = False
    add_prefix_space: bool = False

    def template_variables(self) -> tuple[tuple[str, Any], ...]:
        """transformers' ``special_tokens_map``: what every chat template receives."""
        out: list[tuple[str, Any]] = [(k, _text(v)) for k, v in self.specials if _text(v)]
        if self.additional:
            out.append(("additional_special_tokens", [_text(t) for t in self.additional]))
        return tuple(out)

    def special_contents(self) -> frozenset[str]:
        """The text of every special token the tokenizer's ``all_special_tokens`` lists."""
        named = {_text(v) for _, v in self.specials}
        return frozenset({*named, *(_text(t) for t in self.additional)} - {""})


def _text(token: TokenSpec | str) -> str:
    return token if isinstance(token, str) else token.content


def folder_root(path: str | Path) -> Path:
    """The model folder for ``path``: the folder itself, or the folder of a file in it."""
    root = Path(path).expanduser()
    return root.parent if root.is_file() else root


TOKENIZER_JSON_BYTES = 256 << 20
"""The largest ``tokenizer.json`` read: real ones reach ~35 MB (Gemma 3's 33 MB, its 262 K
vocabulary), 256 MiB is seven times that; Python's JSON of it takes several times its size."""
CONFIG_JSON_BYTES = 32 << 20
"""The largest ``tokenizer_config.json`` / ``special_tokens_map.json`` read: real ones reach
~1.2 MB (Gemma 3's config lists its 6 K added tokens); 100,000 added tokens are ~13 MB, so
32 MiB keeps room for such a vocabulary extension and Python's JSON of it a few hundred MB."""


def check_size(path: Path, limit: int) -> None:
    """Refuse ``path`` when it is over ``limit`` bytes, before reading any of it (a 1 GB
    config took 2.2 GB and 16 s to refuse after reading; a sparse file costs nothing to make)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    if size > limit:
        raise InputError(
            f"{path}: {size:,} bytes, over the {limit >> 20} MiB a model folder's "
            f"{path.name} may have; not a real tokenizer file"
        )


def read_json(path: Path, limit: int = CONFIG_JSON_BYTES) -> dict[str, Any]:
    """A folder's JSON file as a dict; ``{}`` when absent; a one-line error when invalid or
    over ``limit`` bytes."""
    if not path.is_file():
        return {}
    check_size(path, limit)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not valid JSON ({first})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def _spec(value: Any, *, special: bool | None = None) -> TokenSpec | str | None:
    if isinstance(value, str | TokenSpec):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        normalized = value.get("normalized")
        return TokenSpec(
            content=value["content"],
            special=bool(value.get("special", False) if special is None else special),
            lstrip=bool(value.get("lstrip", False)),
            rstrip=bool(value.get("rstrip", False)),
            single_word=bool(value.get("single_word", False)),
            normalized=None if normalized is None else bool(normalized),
        )
    return None


def _decoder(entries: Any) -> tuple[TokenSpec, ...]:
    if not isinstance(entries, Mapping):
        return ()
    pairs = []
    for key, value in entries.items():
        spec = _spec(value)
        if isinstance(spec, TokenSpec) and str(key).lstrip("-").isdigit():
            pairs.append((int(key), spec))
    return tuple(spec for _, spec in sorted(pairs, key=lambda p: p[0]))


def _tokenizer_json_added(root: Path) -> tuple[TokenSpec, ...]:
    data = read_json(root / "tokenizer.json", TOKENIZER_JSON_BYTES)
    entries = {str(t.get("id")): t for t in data.get("added_tokens") or [] if isinstance(t, dict)}
    return _decoder(entries)


def _merge_legacy_map(config: dict[str, Any], root: Path) -> dict[str, Any]:
    """transformers' legacy branch: ``special_tokens_map.json`` fills what the config lacks."""
    merged = dict(config)
    for key, value in read_json(root / "special_tokens_map.json").items():
        if key == "additional_special_tokens" and isinstance(value, list):
            mine = list(merged.get("additional_special_tokens") or [])
            specs = [s for s in (_spec(v, special=True) for v in mine + value) if s is not None]
            seen: list[TokenSpec | str] = []
            for s in specs:
                if _text(s) not in {_text(x) for x in seen}:
                    seen.append(s)
            merged[key] = seen
        else:
            merged[key] = _spec(value, special=True) if isinstance(value, Mapping) else value
    return merged


@functools.lru_cache(maxsize=32)
def folder_tokens(path: str) -> FolderTokens:
    """The token facts of the model folder at ``path`` (or the folder of a file in it)."""
    root = folder_root(path)
    config = read_json(root / "tokenizer_config.json")
    if "added_tokens_decoder" in config:
        added = _decoder(config["added_tokens_decoder"])
    else:
        config = _merge_legacy_map(config, root)
        added = _tokenizer_json_added(root)
    extra = config.get("extra_special_tokens")
    names = [*SPECIAL_ATTRIBUTES, *(extra if isinstance(extra, Mapping) else {})]
    values = {**config, **(extra if isinstance(extra, Mapping) else {})}
    specials = tuple(
        (name, spec)
        for name in names
        if (spec := _spec(values.get(name))) is not None and _text(spec)
    )
    raw_additional = config.get("additional_special_tokens") or []
    additional = tuple(
        spec
        for value in (raw_additional if isinstance(raw_additional, list) else [])
        if (spec := value if isinstance(value, TokenSpec) else _spec(value)) is not None
    )
    return FolderTokens(
        added=added,
        specials=specials,
        additional=additional,
        split_special_tokens=bool(config.get("split_special_tokens", False)),
        add_prefix_space=bool(config.get("add_prefix_space", False)),
    )
