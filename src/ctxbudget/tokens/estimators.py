"""The token estimators of real agent harnesses, reproduced exactly as pure ``str -> int``.

Sources are the pinned harness files the project's seed lesson quotes (each function names its
own). JavaScript harnesses measure ``text.length`` in UTF-16 code units, Python ones ``len(text)``
in code points; each function below counts the way its harness does, so an emoji is 2 chars
for Pi and OpenCode.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

# CoreCoder v0.7.0 corecoder/context.py:24-25. The seed's copy of the CJK class lost characters;
# this is the reading the issue gives: CJK unified + extension A + compatibility ideographs,
# CJK symbols and punctuation, halfwidth and fullwidth forms.
_CORECODER_CJK = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
_CORECODER_SYMBOL = re.compile(r"[^\w\s]")
# ASCII bytes that are not symbols (\w or \s by Python's own regex): deleting them from ASCII
# text leaves exactly the symbols, in one C pass instead of a regex scan.
_ASCII_NON_SYMBOLS = bytes(b for b in range(128) if not _CORECODER_SYMBOL.match(chr(b)))
_CJK_FLAG, _SYMBOL_FLAG = 1, 2
# Past this many characters a text is measured slice by slice: every count below is a sum over
# characters, and a slice's encodings stay small whatever the text's size (a 300 MB line would
# otherwise cost 600 MB of UTF-16 and 2.4 GB of int64 indices at once).
SLICE = 1 << 20


def _sliced(measure: Callable[[str], int], text: str) -> int:
    """``measure(text)`` for an additive ``measure``, computed over bounded slices."""
    if len(text) <= SLICE:
        return measure(text)
    return sum(measure(text[i : i + SLICE]) for i in range(0, len(text), SLICE))


@cache
def _corecoder_flags() -> Any:
    """Per BMP code point, ``_CJK_FLAG | _SYMBOL_FLAG`` as the two regexes above classify it.

    Built once (~15 ms) by running those very regexes over every BMP code point, so the table
    agrees with them under any Python's Unicode database; a text is then classified by one numpy
    lookup. Above U+FFFF the regexes themselves count (see ``_corecoder_counts``).
    """
    import numpy as np

    every = "".join(map(chr, range(0x10000)))
    flags = np.zeros(0x10000, dtype=np.uint8)
    for pattern, flag in ((_CORECODER_CJK, _CJK_FLAG), (_CORECODER_SYMBOL, _SYMBOL_FLAG)):
        for match in re.finditer(pattern.pattern + "+", every):
            flags[match.start() : match.end()] |= flag
    return flags


def _corecoder_counts(text: str) -> tuple[int, int]:
    """(CJK chars, symbol chars) of a non-ASCII text, by a per-code-point table."""
    if len(text) > SLICE:
        parts = [_corecoder_counts(text[i : i + SLICE]) for i in range(0, len(text), SLICE)]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    import numpy as np

    units = text.encode("utf-16-le", "surrogatepass")
    if len(units) == 2 * len(text):
        flags = _corecoder_flags().take(np.frombuffer(units, dtype=np.uint16)).tobytes()
        extra = 0, 0
    else:  # characters above U+FFFF (emoji, flags): the regexes count those few themselves
        points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        astral = points > 0xFFFF
        flags = _corecoder_flags().take(points[~astral]).tobytes()
        rest = points[astral].tobytes().decode("utf-32-le")
        extra = len(_CORECODER_CJK.findall(rest)), len(_CORECODER_SYMBOL.findall(rest))
    # Three byte counts beat numpy's bincount: its fixed cost dominates short texts.
    both = flags.count(_CJK_FLAG | _SYMBOL_FLAG)
    return (
        flags.count(_CJK_FLAG) + both + extra[0],
        flags.count(_SYMBOL_FLAG) + both + extra[1],
    )


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def utf16_length(text: str) -> int:
    """JavaScript's ``text.length``: UTF-16 code units (a character above U+FFFF counts 2)."""
    return _sliced(_utf16_units, text)


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _ascii_chars(text: str) -> int:
    return len(text.encode("ascii", "ignore"))


def _ascii_symbols(text: str) -> int:
    return len(text.encode("ascii").translate(None, _ASCII_NON_SYMBOLS))


def corecoder_v04(text: str) -> int:
    """CoreCoder v0.4.0 ``_approx_tokens``: ``len(text) // 3`` code points.

    Source: CoreCoder v0.4.0 ``corecoder/context.py:22-24`` ("roughly 3 chars per token for
    mixed en/zh content").
    """
    return len(text) // 3


def corecoder_v07(text: str) -> int:
    """CoreCoder v0.7.0 ``_approx_tokens``: CJK at 1.5 chars/token rounded up, the rest at 2.8
    chars/token when symbol-dense (over 25% of all chars match ``[^\\w\\s]``) else 3.4, truncated.

    Source: CoreCoder v0.7.0 ``corecoder/context.py:24-35``. CJK full-width punctuation matches
    both the CJK class and the symbol class, as in the original.
    """
    if text.isascii():
        cjk = 0
        symbols = _sliced(_ascii_symbols, text)
    else:
        cjk, symbols = _corecoder_counts(text)
    rest = len(text) - cjk
    dense = rest > 0 and symbols / len(text) > 0.25
    return math.ceil(cjk / 1.5) + int(rest / (2.8 if dense else 3.4))


def pi(text: str) -> int:
    """Pi ``estimateTokens``: ``Math.ceil(chars / 4)`` with chars = UTF-16 ``text.length``.

    Source: badlogic/pi-mono ``packages/coding-agent/src/core/compaction/compaction.ts:266-292``.
    """
    return math.ceil(utf16_length(text) / 4)


def opencode(text: str) -> int:
    """OpenCode ``Token.estimate``: ``Math.round(chars / 4)`` with chars = UTF-16 ``text.length``.

    JavaScript ``Math.round`` rounds halves up (``floor(x + 0.5)``), unlike Python's ``round``.
    Source: sst/opencode ``packages/core/src/util/token.ts``.
    """
    return math.floor(utf16_length(text) / 4 + 0.5)


def codex(text: str) -> int:
    """Codex ``approx_token_count``: UTF-8 bytes / 4, rounded up.

    Source: openai/codex ``codex-rs/utils/string/src/truncate.rs:4,71-74`` (4 bytes per token).
    """
    return math.ceil(_sliced(_utf8_bytes, text) / 4)


def miniagent(text: str) -> int:
    """miniagent ``HeuristicCounter``: ASCII chars / 3.5 plus 1 per other char, rounded up.

    Source: the seed lesson's project ``miniagent/tokens.py`` (HeuristicCounter).
    """
    ascii_chars = _sliced(_ascii_chars, text)
    return math.ceil(ascii_chars / 3.5 + (len(text) - ascii_chars))


HARNESS_ESTIMATORS: Mapping[str, Callable[[str], int]] = MappingProxyType(
    {
        "corecoder-0.4": corecoder_v04,
        "corecoder-0.7": corecoder_v07,
        "pi": pi,
        "opencode": opencode,
        "codex": codex,
        "miniagent": miniagent,
    }
)
"""The harness heuristics by name, in the seed's order."""
