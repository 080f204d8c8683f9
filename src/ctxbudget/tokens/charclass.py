"""Character-class counts of a text: the features of the calibrated estimators.

Below U+3000 the UTF-8 lead byte names the class (``bytes.translate``, in C). From U+3000 up
(CJK, kana, Hangul, fullwidth) each code point has its own class in a per-vocabulary table
(``CodepointTable``): what it costs alone and how often the vocabulary merges it with others.
"""

from __future__ import annotations

import base64
import codecs
import operator
import zlib
from collections.abc import Callable
from functools import cache
from typing import Any

# Classes of a character. Continuation bytes (CONT) are dropped so each character is counted
# once, by its lead byte; characters from U+3000 up get theirs from a CodepointTable.
_LOWER, _UPPER, _DIGIT, _SPACE, _NEWLINE, _PUNCT = 0, 1, 2, 3, 4, 5
_LATIN_EXT, _INDIC, _SYMBOL = 6, 7, 8
_CJK_SOLO, _CJK_SOME, _CJK_MANY, _CJK_2, _CJK_3, _ASTRAL, _CONT = range(9, 16)
_N_CLASSES = 16

FEATURES = (
    "lower",  # ASCII lowercase letters
    "lower_runs",
    "upper",  # ASCII uppercase letters
    "upper_runs",  # with lower_runs: words, camelCase humps, ALL-CAPS names
    "digits",
    "digit_runs",
    "spaces",  # space and tab
    "space_runs",
    "newlines",  # \n and \r
    "punct",  # ASCII punctuation and control characters
    "punct_runs",
    "latin_ext",  # two-byte UTF-8: Latin-1 supplement, Greek, Cyrillic, Hebrew, Arabic, ...
    "latin_ext_runs",
    "indic",  # U+0800..U+1FFF: Indic, Thai, Georgian, Ethiopic, ...
    "symbols",  # U+2000..U+2FFF: general punctuation (“ ” — …), arrows, box drawing
    # U+3000..U+FFFF (CJK punctuation, kana, Han, Hangul, fullwidth forms), by the vocabulary:
    "cjk_solo",  # one token alone, in no token of two or more such characters
    "cjk_some",  # one token alone, in 1-9 tokens of two or more such characters
    "cjk_many",  # one token alone, in 10 or more (common word-forming characters)
    "cjk_2",  # two tokens alone
    "cjk_3",  # three or more tokens alone (and lone surrogates)
    "astral",  # above U+FFFF: emoji, CJK extension B and beyond
)
CJK_FEATURES = FEATURES[15:20]
CJK_START = 0x3000
"""The first code point whose class comes from a vocabulary's table."""
MANY_MERGES = 10
"""A character in this many multi-character tokens is ``cjk_many``."""
_RUN_CLASSES = (_LOWER, _UPPER, _DIGIT, _SPACE, _PUNCT, _LATIN_EXT)
# Texts are counted in blocks of at most this many characters: the fused code's run masks are
# this long, and a block's byte strings stay small whatever the text's size (a 300 MB line).
BLOCK = 4096


def _class_of_byte(b: int) -> int:
    c = chr(b)
    if b < 0x80:
        if c.islower():
            return _LOWER
        if c.isupper():
            return _UPPER
        if c.isdigit():
            return _DIGIT
        if c in " \t":
            return _SPACE
        return _NEWLINE if c in "\r\n" else _PUNCT
    for limit, cls in ((0xC0, _CONT), (0xE0, _LATIN_EXT), (0xE2, _INDIC), (0xE3, _SYMBOL)):
        if b < limit:
            return cls
    return _ASTRAL  # U+3000 and up never take this path (see _letters)


_LETTERS = bytes(0x41 + _class_of_byte(b) for b in range(256))
_CONTINUATION = bytes(range(0x80, 0xC0))
CJK_CLASS_LETTERS = bytes(0x41 + c for c in range(_CJK_SOLO, _CJK_3 + 1))
"""The letters a table may hold for U+3000..U+FFFF, in ``CJK_FEATURES`` order."""


class CodepointTable:
    """One vocabulary's class letter for every code point (U+3000..U+FFFF from its tokens).

    ``packed`` holds one letter of ``CJK_CLASS_LETTERS`` per code point from U+3000 to U+FFFF;
    numpy is imported, and the 64 KB lookup array built, on the first text that needs it.
    """

    def __init__(self, packed: bytes) -> None:
        if len(packed) != 0x10000 - CJK_START or packed.translate(None, CJK_CLASS_LETTERS):
            raise ValueError("a code point table holds one CJK class letter per U+3000..U+FFFF")
        self.packed = packed
        self._array: Any = None
        self._take: Callable[..., Any] | None = None

    def array(self) -> Any:
        """The numpy array of class letters, U+0000..U+FFFF and then one astral letter."""
        if self._array is None:
            self._load()
        return self._array

    def _load(self) -> Callable[..., Any]:
        import numpy as np

        lead = (chr(cp).encode("utf-8")[0] for cp in range(CJK_START))
        below = bytes(_LETTERS[b] for b in lead)
        table = np.frombuffer(below + self.packed + bytes([0x41 + _ASTRAL]), dtype=np.uint8)
        self._array, self._take = table, table.take
        return table.take

    def letters(self, utf16: bytes, text: str) -> bytes:
        """One class letter per character of ``text`` (``utf16`` is its UTF-16-LE encoding)."""
        import numpy as np

        take = self._take or self._load()
        if len(utf16) == 2 * len(text):  # no character above U+FFFF
            letters: bytes = take(np.frombuffer(utf16, dtype=np.uint16)).tobytes()
            return letters
        points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        letters = take(points, mode="clip").tobytes()  # above U+FFFF: the last, astral letter
        return letters


def unpack_classes(packed: str) -> bytes:
    """A table's class letters from their calibration.json form (base64 of zlib)."""
    return zlib.decompress(base64.b64decode(packed))


def pack_classes(letters: bytes) -> str:
    """The calibration.json form of a table's class letters (the inverse of unpack_classes)."""
    return base64.b64encode(zlib.compress(letters, 9)).decode("ascii")


def _letters(text: str, table: CodepointTable) -> bytes:
    """One class letter per character of a non-ASCII text."""
    return table.letters(text.encode("utf-16-le", "surrogatepass"), text)


def features(text: str, table: CodepointTable) -> tuple[int, ...]:
    """The counts named in ``FEATURES``, in that order, by ``table``'s classes."""
    if len(text) <= BLOCK:
        return short_features(text, table)
    totals = [0] * len(FEATURES)
    for start in range(0, len(text), BLOCK):
        for i, value in enumerate(short_features(text[start : start + BLOCK], table)):
            totals[i] += value
        if start:  # a run that goes on across the cut was counted twice
            for run, member in _RUN_PAIRS:
                totals[run] -= _runs_across(text[start - 1 : start + 1], table, member)
    return tuple(totals)


_RUN_PAIRS = [
    (FEATURES.index(f"{name}_runs"), cls)
    for name, cls in (
        ("lower", _LOWER),
        ("upper", _UPPER),
        ("digit", _DIGIT),
        ("space", _SPACE),
        ("punct", _PUNCT),
        ("latin_ext", _LATIN_EXT),
    )
]


def _runs_across(pair: str, table: CodepointTable, cls: int) -> int:
    """1 when both characters of ``pair`` are of class ``cls``, else 0."""
    ascii_ = pair.isascii()
    letters = pair.encode("ascii").translate(_LETTERS) if ascii_ else _letters(pair, table)
    return int(letters == bytes([0x41 + cls]) * 2)


# Each character becomes one byte: its class letter (b"A" + class) for the counts, and one bit
# per run class for the runs, so a run start is "my bit set, previous one not".
_RUN_BITS = bytes(
    1 << _RUN_CLASSES.index(b - 0x41) if b - 0x41 in _RUN_CLASSES else 0 for b in range(256)
)
# ASCII-only text: the bits straight from the bytes, with newline as a seventh bit (counted only).
_ASCII_BITS = bytes(
    _RUN_BITS[_LETTERS[b]] or (0x40 if _LETTERS[b] == 0x41 + _NEWLINE else 0) for b in range(256)
)
_BIT = [bytes([1 << i]) for i in range(7)]
_L = [bytes([0x41 + c]) for c in range(_N_CLASSES)]


def _run_starts(bits: bytes) -> bytes:
    """Per character, the bits of the run classes whose run starts there."""
    value = int.from_bytes(bits, "big")
    return (value ^ (value & (value >> 8))).to_bytes(len(bits), "big")


def short_features(text: str, table: CodepointTable) -> tuple[int, ...]:
    """``features`` of one block, by ``bytes.translate`` and ``bytes.count``."""
    if text.isascii():
        return _ascii_features(text.encode("ascii"))
    chars = _letters(text, table)
    count = chars.count
    runs = _run_starts(chars.translate(_RUN_BITS)).count
    bit = _BIT
    return (
        count(_L[_LOWER]),
        runs(bit[0]),
        count(_L[_UPPER]),
        runs(bit[1]),
        count(_L[_DIGIT]),
        runs(bit[2]),
        count(_L[_SPACE]),
        runs(bit[3]),
        count(_L[_NEWLINE]),
        count(_L[_PUNCT]),
        runs(bit[4]),
        count(_L[_LATIN_EXT]),
        runs(bit[5]),
        count(_L[_INDIC]),
        count(_L[_SYMBOL]),
        *(count(_L[c]) for c in range(_CJK_SOLO, _CJK_3 + 1)),
        count(_L[_ASTRAL]),
    )


def _ascii_features(raw: bytes) -> tuple[int, ...]:
    if not raw:
        return (0,) * len(FEATURES)
    bits = raw.translate(_ASCII_BITS)
    count = bits.count
    runs = _run_starts(bits).count
    bit = _BIT
    lower, upper, digits, spaces = count(bit[0]), count(bit[1]), count(bit[2]), count(bit[3])
    newlines = count(bit[6])
    return (
        lower,
        runs(bit[0]),
        upper,
        runs(bit[1]),
        digits,
        runs(bit[2]),
        spaces,
        runs(bit[3]),
        newlines,
        len(raw) - lower - upper - digits - spaces - newlines,
        runs(bit[4]),
        *_NON_ASCII_ZEROS,
    )


_NON_ASCII_ZEROS = (0,) * (len(FEATURES) - 11)


UNITS = 100_000
"""Weights are written with 5 decimals, so each is a whole number of 1/100,000 tokens."""


def weight_units(weights: tuple[float, ...]) -> tuple[int, ...]:
    """Each weight in whole ``UNITS`` (exact for the 5-decimal weights calibration.json holds)."""
    return tuple(round(w * UNITS) for w in weights)


def reference_estimate(weights: tuple[float, ...], table: CodepointTable, text: str) -> int:
    """``ceil(sum(w * n for w, n in zip(weights, features(text))))``, in exact integers.

    Summed in whole ``UNITS``, so no float rounding can move an estimate by a token.
    """
    total: int = sum(map(operator.mul, weight_units(weights), features(text, table)))
    return -(-total // UNITS)


# Fused linear models: ``linear_estimator`` writes, per weight vector, one straight-line function
# that gives ``reference_estimate``'s number fast: it counts only the features whose weight is not
# zero (``bytes.count``, ~0.1-0.2 µs each on 200 characters; issue 2 wants 5x tiktoken there) and
# sums whole units. Non-ASCII text instead looks up each code point's weight (one numpy ``take``)
# and sums them with one float64 ``dot`` (exact: whole units, far below 2**53), ~1.5 µs in all
# where a count per class cost ~0.15 µs each; its runs come from UTF-8 lead bytes, as in reference.
# (Tried: a 32-bit word per character, weight above run bit, summed as one big integer modulo
# 2**32 - 1: slower, the integer is four times as long and its division costs ~12 ns a digit.)
_RUN_MASKS = [int.from_bytes(bytes([1 << i]) * BLOCK, "little") for i in range(6)]
_CLASS_OF = {
    "lower": _LOWER,
    "upper": _UPPER,
    "digits": _DIGIT,
    "spaces": _SPACE,
    "newlines": _NEWLINE,
    "punct": _PUNCT,
    "latin_ext": _LATIN_EXT,
    "indic": _INDIC,
    "symbols": _SYMBOL,
    **{f: _CJK_SOLO + i for i, f in enumerate(CJK_FEATURES)},
    "astral": _ASTRAL,
}
_RUN_OF = {
    "lower_runs": "lower",
    "upper_runs": "upper",
    "digit_runs": "digits",
    "space_runs": "spaces",
    "punct_runs": "punct",
    "latin_ext_runs": "latin_ext",
}
# Classes most texts of a path lack: counted only when a cheap test finds one (prose has no
# digits; CJK text few digits and no Cyrillic), and left out of that branch's sum.
_ASCII_RARE = ("digits", "digit_runs")
_NON_ASCII_RARE_RUNS = ("digits", "latin_ext")
# A UTF-8 byte's run bit: lead bytes by their class, and none for what is not a run class.
_LEAD_RUN_BITS = bytes(_RUN_BITS[letter] for letter in _LETTERS)
_ASCII_BIT = {"lower": 1, "upper": 2, "digits": 4, "spaces": 8, "punct": 16, "newlines": 0x40}


def _run_line(run: str) -> str:
    return f"{run} = (s & _M{_RUN_CLASSES.index(_CLASS_OF[_RUN_OF[run]])}).bit_count()"


def _total(units: dict[str, int], used: list[str]) -> str:
    """The return line: the estimate rounded up (the ``units`` variant strips the rounding)."""
    sum_ = " + ".join(f"{units[f]} * {f}" for f in used) or "0"
    return f"return -(-({sum_}) // {UNITS})"


def _as_units(line: str) -> str:
    """A return line of ``_total`` that returns the unrounded sum, in units, instead."""
    if line.lstrip().startswith("return -(-("):
        return line.replace("return -(-(", "return (").replace(f") // {UNITS})", ")")
    return line


def _ascii_source(units: dict[str, int]) -> list[str]:
    """Body lines of the ASCII branch: count the features with a weight, return the estimate."""
    used = [f for f in FEATURES[:11] if units[f]]
    counts = [f for f in _ASCII_BIT if f in used]
    lines = ["t = text.encode('ascii').translate(_ASCII_BITS)", "count = t.count"]
    derive = len(counts) == 6  # then the most common class is what the others leave
    lines += [f"{f} = count({_ASCII_BIT[f]})" for f in counts if f not in ("lower", "digits")]
    lines += ["lower = count(1)"] if "lower" in counts and not derive else []
    if any(f in _RUN_OF for f in used):
        lines += ["x = _from_bytes(t, 'little')", "s = x & ~(x << 8)"]
    lines += [_run_line(f) for f in used if f in _RUN_OF and f not in _ASCII_RARE]
    common = [f for f in used if f not in _ASCII_RARE]
    rest = "len(t) - upper - spaces - punct - newlines"
    if not set(_ASCII_RARE) & set(used):
        return lines + ([f"lower = {rest}"] if derive else []) + [_total(units, used)]
    rare = [f"digits = count({_ASCII_BIT['digits']})"] if "digits" in used else []
    rare += [f"lower = {rest} - digits"] * derive
    rare += [_run_line("digit_runs")] if "digit_runs" in used else []
    return [
        *lines,
        f"if {_ASCII_BIT['digits']} in t:",
        *(f"    {line}" for line in [*rare, _total(units, used)]),
        *([f"lower = {rest}"] * derive),
        _total(units, common),
    ]


def _non_ascii_source(units: dict[str, int]) -> list[str]:
    """Body lines of the other branch: the class weights summed by numpy, the runs from UTF-8."""
    counted = [f for f in _CLASS_OF if units[f]]
    lines = []
    if counted:  # one weight (in units) per code point, summed exactly in float64 (< 2**53)
        lines += [
            "if _weigh is None:",
            "    _load_table()",  # binds _weigh and numpy's names (this model's first non-ASCII)
            "u = _utf16(text, 'surrogatepass')[0]",
            "if len(u) == len(text) << 1:",
            "    w = int(_weigh(_frombuffer(u, _uint16)).dot(_ONES[len(text)]))",
            "else:",  # above U+FFFF: code points, clipped to the last (astral) entry
            "    u = _utf32(text, 'surrogatepass')[0]",
            "    w = int(_weigh(_frombuffer(u, _uint32), mode='clip').dot(_ONES[len(text)]))",
        ]
    runs = [f for f in FEATURES if f in _RUN_OF and units[f]]
    if runs:  # run classes are all below U+0800: the UTF-8 lead byte names them
        lines += [
            "t = _utf8(text, 'surrogatepass')[0].translate(_LEAD_RUN_BITS, _CONTINUATION)",
            "x = _from_bytes(t, 'little')",
            "s = x & ~(x << 8)",
        ]
    for run in runs:
        bit = 1 << _RUN_CLASSES.index(_CLASS_OF[_RUN_OF[run]])
        rare = _RUN_OF[run] in _NON_ASCII_RARE_RUNS  # most texts lack it: test before counting
        lines.append(f"{_run_line(run)}{f' if {bit} in t else 0' if rare else ''}")
    sum_ = " + ".join([*(["w"] if counted else []), *(f"{units[f]} * {f}" for f in runs)])
    return [*lines, f"return -(-({sum_ or '0'}) // {UNITS})"]


def linear_estimator(
    weights: tuple[float, ...], table: CodepointTable, name: str
) -> Callable[[str], int]:
    """``reference_estimate(weights, table, text)``, fused and fast."""
    units = dict(zip(FEATURES, weight_units(weights), strict=True))
    branches = [
        "    if text.isascii():",
        *(f"        {line}" for line in _ascii_source(units)),
        *(f"    {line}" for line in _non_ascii_source(units)),
    ]
    runs = [(units[FEATURES[run]], cls) for run, cls in _RUN_PAIRS if units[FEATURES[run]]]
    body = [
        "def estimate(text):",
        "    if len(text) > BLOCK:",
        "        return -(-_long_units(text) // UNITS)",
        *branches,
        "def block_units(text):",
        *map(_as_units, branches),
        "def _long_units(text):",
        "    total = 0",
        "    for start in range(0, len(text), BLOCK):",
        "        total += block_units(text[start : start + BLOCK])",
        *(
            [
                "        if start:",  # a run that goes on across the cut was counted twice
                "            pair = text[start - 1 : start + 1]",
                *(f"            total -= {w} * _runs_across(pair, TABLE, {c})" for w, c in runs),
            ]
            if runs
            else []
        ),
        "    return total",
    ]
    namespace: dict[str, Any] = {
        **globals(),
        "TABLE": table,
        **{f"_M{i}": mask for i, mask in enumerate(_RUN_MASKS)},  # a global loads faster
        # Called straight, not by name: str.encode looks the codec up (~0.25 µs for UTF-16).
        "_utf8": codecs.utf_8_encode,
        "_utf16": codecs.utf_16_le_encode,
        "_utf32": codecs.utf_32_le_encode,
        "_from_bytes": int.from_bytes,
        "_weigh": None,  # bound once numpy is loaded (the first non-ASCII text)
    }
    exec(compile("\n".join(body), f"<ctxbudget estimator {name}>", "exec"), namespace)

    def load_table() -> None:  # nothing refers back to the estimator: it goes when dropped
        import numpy as np

        of_letter = np.zeros(256)
        for feature, cls in _CLASS_OF.items():
            of_letter[0x41 + cls] = units[feature]
        namespace.update(
            _weigh=of_letter[table.array()].take,
            _ONES=_ones(),
            _frombuffer=np.frombuffer,
            _uint16=np.uint16,
            _uint32=np.uint32,
        )

    namespace["_load_table"] = load_table
    function: Callable[[str], int] = namespace["estimate"]
    return function


@cache
def _ones() -> list[Any]:
    """Per length up to ``BLOCK``, a float64 vector of ones (views of one array, ~0.5 MB)."""
    import numpy as np

    ones = np.ones(BLOCK)
    return [ones[:n] for n in range(BLOCK + 1)]
