"""Character-class counts of a text: the features of the calibrated estimators.

The UTF-8 lead byte names the script block, so a 256-entry table classifies every character in C:
``bytes.translate`` for short texts (no fixed numpy cost), numpy for long ones.
"""

from __future__ import annotations

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
