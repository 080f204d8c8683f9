"""Character-class counts of a text: the features of the calibrated estimators.

The UTF-8 lead byte names the script block, so a 256-entry table classifies every character in C:
``bytes.translate`` for short texts (no fixed numpy cost), numpy for long ones.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Classes of a UTF-8 byte. Continuation bytes (CONT) are dropped so each character is counted
# once, by its lead byte; 0xE3 (U+3000..U+3FFF) is split by its second byte below.
_LOWER, _UPPER, _DIGIT, _SPACE, _NEWLINE, _PUNCT = 0, 1, 2, 3, 4, 5
_LATIN_EXT, _INDIC, _SYMBOL, _E3, _HAN, _HANGUL, _FULLWIDTH, _ASTRAL, _CONT = range(6, 15)
_N_CLASSES = 15

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
    "cjk_punct",  # U+3000..U+303F: 、。「」
    "kana",  # U+3040..U+30FF
    "han",  # U+3100..U+9FFF: CJK ideographs (with extension A), bopomofo
    "hangul",  # U+A000..U+DFFF: mostly Hangul syllables
    "fullwidth",  # U+E000..U+FFFF: fullwidth forms （），compatibility ideographs, private use
    "astral",  # four-byte UTF-8: emoji, CJK extension B and beyond
)
_RUN_CLASSES = (_LOWER, _UPPER, _DIGIT, _SPACE, _PUNCT, _LATIN_EXT)
# Up to this many characters the pure-Python path is faster than numpy's fixed cost per call
# (bench/estimators.py: the two cross near 2-3k characters).
SHORT_TEXT = 2048


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
    for limit, cls in ((0xE4, _E3), (0xEA, _HAN), (0xEE, _HANGUL), (0xF0, _FULLWIDTH)):
        if b < limit:
            return cls
    return _ASTRAL


@cache
def _table() -> Any:
    import numpy as np

    return np.array([_class_of_byte(b) for b in range(256)], dtype=np.uint8)


def _e3_split(data: np.ndarray[Any, Any]) -> tuple[int, int, int]:
    """(cjk_punct, kana, han) among characters whose UTF-8 lead byte is 0xE3."""
    import numpy as np

    second = data[np.flatnonzero(data[:-1] == 0xE3) + 1]
    punct = int(np.count_nonzero(second == 0x80))  # U+3000..U+303F
    kana = int(np.count_nonzero((second >= 0x81) & (second <= 0x83)))  # U+3040..U+30FF
    return punct, kana, len(second) - punct - kana


def features(text: str) -> tuple[int, ...]:
    """The counts named in ``FEATURES``, in that order."""
    if len(text) <= SHORT_TEXT:
        return short_features(text)
    return numpy_features(text)


def numpy_features(text: str) -> tuple[int, ...]:
    """``features`` by numpy: one table lookup and two histograms, fastest on long texts."""
    import numpy as np

    raw = text.encode("utf-8", "surrogatepass")
    if not raw:
        return (0,) * len(FEATURES)
    data = np.frombuffer(raw, dtype=np.uint8)
    classes = _table().take(data)
    chars = classes if text.isascii() else classes[classes != _CONT]
    hist = np.bincount(chars, minlength=_N_CLASSES)
    starts = np.bincount(chars[1:][chars[1:] != chars[:-1]], minlength=_N_CLASSES)
    starts[chars[0]] += 1
    punct, kana, han = _e3_split(data) if hist[_E3] else (0, 0, 0)
    counts = [int(v) for v in hist]
    runs = {cls: int(starts[cls]) for cls in _RUN_CLASSES}
    return (
        counts[_LOWER],
        runs[_LOWER],
        counts[_UPPER],
        runs[_UPPER],
        counts[_DIGIT],
        runs[_DIGIT],
        counts[_SPACE],
        runs[_SPACE],
        counts[_NEWLINE],
        counts[_PUNCT],
        runs[_PUNCT],
        counts[_LATIN_EXT],
        runs[_LATIN_EXT],
        counts[_INDIC],
        counts[_SYMBOL],
        punct,
        kana,
        han + counts[_HAN],
        counts[_HANGUL],
        counts[_FULLWIDTH],
        counts[_ASTRAL],
    )


# The pure-Python path. Each character becomes one byte: its class letter (b"A" + class) for the
# counts, and one bit per run class for the runs, so a run start is "my bit set, previous one not".
_LETTERS = bytes(0x41 + _class_of_byte(b) for b in range(256))
_CONTINUATION = bytes(range(0x80, 0xC0))
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


def short_features(text: str) -> tuple[int, ...]:
    """``features`` by ``bytes.translate`` and ``bytes.count``: no numpy, fastest on short texts."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) == len(text):
        return _ascii_features(raw)
    chars = raw.translate(_LETTERS, _CONTINUATION)
    count = chars.count
    runs = _run_starts(chars.translate(_RUN_BITS)).count
    e3 = count(_L[_E3])
    punct = raw.count(b"\xe3\x80") if e3 else 0  # U+3000..U+303F
    kana = raw.count(b"\xe3\x81") + raw.count(b"\xe3\x82") + raw.count(b"\xe3\x83") if e3 else 0
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
        punct,
        kana,
        e3 - punct - kana + count(_L[_HAN]),
        count(_L[_HANGUL]),
        count(_L[_FULLWIDTH]),
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


# Fused linear models: ``linear_estimator`` writes, per weight vector, one straight-line function
# that counts only the features whose weight is not zero and sums the products in ``FEATURES``
# order. Skipped terms are exact zeros, so the float total is the one ``sum`` of all products
# gives. A count costs ~0.2 µs per 200 characters, so every count left out matters (issue 2:
# 5x faster than tiktoken on 200 characters).
# Up to this many characters the fused path beats numpy (they cross near 4-5k characters).
FUSED_TEXT = 4096
# Run starts: one bit per run class (_RUN_BITS order), masked per class from a big integer.
_RUN_MASKS = [int.from_bytes(bytes([1 << i]) * FUSED_TEXT, "little") for i in range(6)]
# Non-ASCII text with U+3000..U+3FFF characters keeps their second UTF-8 byte as a letter:
# "p" U+3000..U+303F (CJK punctuation), "q" U+3040..U+30FF (kana), "r" any other continuation.
_LETTERS_E3 = bytes(
    _LETTERS[b] if not 0x80 <= b < 0xC0 else (0x70 if b == 0x80 else 0x71 if b < 0x84 else 0x72)
    for b in range(256)
)
# Then the U+3000..U+3FFF letter joins Han's (one count less); punctuation and kana are taken out.
_E3_AS_HAN = bytes(0x41 + _HAN if b == 0x41 + _E3 else b for b in range(256))
# A model with one weight for CJK punctuation, kana and Han counts them all as Han letters.
_LETTERS_CJK = _LETTERS.translate(_E3_AS_HAN)
_E3_SPLIT = ("cjk_punct", "kana", "han")
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
    "hangul": _HANGUL,
    "fullwidth": _FULLWIDTH,
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
# digits; CJK and English text no Hangul, Indic or emoji), and left out of that branch's sum.
_ASCII_RARE = ("digits", "digit_runs")
_RARE = ("digits", "latin_ext", "indic", "symbols", "hangul", "astral")
_NON_ASCII_RARE = (*_RARE, "digit_runs", "latin_ext_runs")
_ASCII_BIT = {"lower": 1, "upper": 2, "digits": 4, "spaces": 8, "punct": 16, "newlines": 0x40}


def _run_line(run: str) -> str:
    return f"{run} = (s & _M{_RUN_CLASSES.index(_CLASS_OF[_RUN_OF[run]])}).bit_count()"


def _total(weights: dict[str, float], used: list[str]) -> str:
    sum_ = " + ".join(f"{weights[f]!r} * {f}" for f in used) or "0.0"
    return f"return _ceil({sum_} - 1e-9)"


def _ascii_source(weights: dict[str, float]) -> list[str]:
    """Body lines of the ASCII branch: count the features with a weight, return the estimate."""
    used = [f for f in FEATURES[:11] if weights[f]]
    counts = [f for f in _ASCII_BIT if f in used]
    lines = ["t = text.encode('ascii').translate(_ASCII_BITS)", "count = t.count"]
    derive = len(counts) == 6  # then the most common class is what the others leave
    lines += [f"{f} = count({_ASCII_BIT[f]})" for f in counts if f not in ("lower", "digits")]
    lines += ["lower = count(1)"] if "lower" in counts and not derive else []
    if any(f in _RUN_OF for f in used):
        lines += ["x = int.from_bytes(t, 'little')", "s = x & ~(x << 8)"]
    lines += [_run_line(f) for f in used if f in _RUN_OF and f not in _ASCII_RARE]
    common = [f for f in used if f not in _ASCII_RARE]
    rest = "len(t) - upper - spaces - punct - newlines"
    if not set(_ASCII_RARE) & set(used):
        return lines + ([f"lower = {rest}"] if derive else []) + [_total(weights, used)]
    rare = [f"digits = count({_ASCII_BIT['digits']})"] if "digits" in used else []
    rare += [f"lower = {rest} - digits"] * derive
    rare += [_run_line("digit_runs")] if "digit_runs" in used else []
    return [
        *lines,
        f"if {_ASCII_BIT['digits']} in t:",
        *(f"    {line}" for line in [*rare, _total(weights, used)]),
        *([f"lower = {rest}"] * derive),
        _total(weights, common),
    ]


def _non_ascii_source(weights: dict[str, float]) -> list[str]:
    """Body lines of the non-ASCII branch: count the features with a weight, return the estimate."""
    used = [f for f in FEATURES if weights[f]]
    lines = ["raw = text.encode('utf-8', 'surrogatepass')"]
    if weights["cjk_punct"] == weights["kana"] == weights["han"]:
        # One weight for all of U+3000..U+9FFF: no split of U+3000..U+3FFF needed (saves a
        # translate and two two-byte counts, ~1.5 µs on 200 Japanese characters). The products
        # regroup as w * (a + b + c); with 5-decimal weights that moves the total by far less
        # than the 1e-9 the rounding allows, so the estimate is the reference formula's.
        lines.append("chars = raw.translate(_LETTERS_CJK, _CONTINUATION)")
        if "han" in used:
            lines.append(f"han = chars.count({0x41 + _HAN})")
        return _non_ascii_counts(lines, weights, [f for f in used if f not in _E3_SPLIT[:2]])
    if {"cjk_punct", "kana", "han"} & set(used):
        lines += [
            "if 0xE3 in raw:",
            "    r = raw.translate(_LETTERS_E3)",
            "    chars = r.translate(_E3_AS_HAN, b'pqr')",
            "    cjk_punct, kana = r.count(b'Jp'), r.count(b'Jq')",
            "else:",
            "    chars = raw.translate(_LETTERS, _CONTINUATION)",
            "    cjk_punct = kana = 0",
        ]
    else:
        lines.append("chars = raw.translate(_LETTERS, _CONTINUATION)")
    lines += [f"han = chars.count({0x41 + _HAN}) - cjk_punct - kana"] if "han" in used else []
    return _non_ascii_counts(lines, weights, used)


def _non_ascii_counts(lines: list[str], weights: dict[str, float], used: list[str]) -> list[str]:
    """The rest of the non-ASCII branch, after ``chars`` (and the CJK counts) are known."""
    lines = [*lines, "count = chars.count"]
    lines += [
        f"{f} = count({0x41 + c})" for f, c in _CLASS_OF.items() if f in used and f not in _RARE
    ]
    if any(f in _RUN_OF for f in used):
        lines += ["x = int.from_bytes(chars.translate(_RUN_BITS), 'little')", "s = x & ~(x << 8)"]
    lines += [_run_line(f) for f in used if f in _RUN_OF and f not in _NON_ASCII_RARE]
    rare_used = [f for f in used if f in _NON_ASCII_RARE]
    if not rare_used:
        return [*lines, _total(weights, used)]
    # The rare classes are counted in a string of only them, usually empty.
    common = bytes(0x41 + c for f, c in _CLASS_OF.items() if f not in _RARE) + b"JK"
    rare = ["rc = rare.count", *(f"{f} = rc({0x41 + _CLASS_OF[f]})" for f in _RARE if f in used)]
    if "digit_runs" in used:
        rare += ["digits = rc(67)" if "digits" not in used else "", _run_line("digit_runs")]
    if "latin_ext_runs" in used:
        rare += ["latin_ext = rc(71)" if "latin_ext" not in used else ""]
        rare += [f"{_run_line('latin_ext_runs')} if latin_ext else 0"]
    return [
        *lines,
        f"rare = chars.translate(None, {common!r})",
        "if rare:",
        *(f"    {line}" for line in [*filter(None, rare), _total(weights, used)]),
        _total(weights, [f for f in used if f not in _NON_ASCII_RARE]),
    ]


def linear_estimator(weights: tuple[float, ...], name: str) -> Callable[[str], int]:
    """``ceil(sum(w * n for w, n in zip(weights, features(text))) - 1e-9)``, fused and fast.

    The 1e-9 keeps a total that is an integer in exact arithmetic from rounding up.
    """
    by_name = dict(zip(FEATURES, weights, strict=True))
    body = [
        "def estimate(text):",
        "    if len(text) > FUSED_TEXT:",
        "        return _ceil(sum(map(_mul, WEIGHTS, numpy_features(text))) - 1e-9)",
        "    if text.isascii():",
        *(f"        {line}" for line in _ascii_source(by_name)),
        *(f"    {line}" for line in _non_ascii_source(by_name)),
    ]
    namespace: dict[str, Any] = {
        **globals(),
        "WEIGHTS": weights,
        **{f"_M{i}": mask for i, mask in enumerate(_RUN_MASKS)},  # a global loads faster
        "_ceil": math.ceil,
        "_mul": operator.mul,
    }
    exec(compile("\n".join(body), f"<ctxbudget estimator {name}>", "exec"), namespace)
    function: Callable[[str], int] = namespace["estimate"]
    return function
