"""A long text in bounded pieces, cut only where the tokenizer would start a pre-token anyway.

A tokenizer handed a whole 10 MB message builds its ids (and Hugging Face ``tokenizers`` its
offsets and alignments, ~170 bytes a character) for all of it at once, and its regex engine may
give up on one long match. :class:`~ctxbudget.tokens.registry.ExactTokenizer` hands it at most
:data:`PIECE_CHARS` characters at a time instead, cut between two pre-tokenizer pieces, so the
counts of the pieces add up to the count of the whole.
"""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Callable, Iterator, Sequence

PIECE_CHARS = 1 << 18
"""An exact tokenizer is given at most about this many characters at once: its list of ids (36
bytes an id in Python) stays a few MB even for a chunk of text with no whitespace to cut at."""
SEARCH_CHARS = 1 << 16
"""How far back from ``PIECE_CHARS`` a cut between two pre-tokenizer pieces is looked for."""

CutRule = Callable[[str, str], bool]
"""Whether a pre-tokenizer always starts a piece between the characters ``before`` and ``after``."""


def cuts_between_pieces(before: str, after: str) -> bool:
    """Whether the known pre-tokenizers (cl100k, o200k, Qwen, Llama 3) start a piece at ``after``.

    A letter or digit followed by a digit or letter of the other kind, or by punctuation or a
    symbol: their patterns end a letter run at a non-letter and a digit run at a non-digit, and
    punctuation never joins the run before it, so no match holds both characters and the match
    holding ``before`` ends between them. Not ``'`` (o200k keeps ``don't`` whole, the others
    ``'s``), not two digits (cl100k and Llama 3 group digits by three from the run's start).

    An NFC normalizer (Qwen's) changes nothing either: a letter, digit, punctuation mark or
    symbol has no combining class and is never the second of a canonical composition, except
    Hangul vowel/trailing jamo after a letter, which is not a cut here (checked over all of
    Unicode in tests/tokens/test_pieces.py).
    """
    a, b = unicodedata.category(before)[0], unicodedata.category(after)[0]
    if a not in "LN" or after == "'":
        return False
    return (a != b and b in "LN") or b in "PS"


def bounded_pieces(
    text: str,
    limit: int = PIECE_CHARS,
    search: int = SEARCH_CHARS,
    *,
    rule: CutRule = cuts_between_pieces,
    keep: Sequence[tuple[int, int]] = (),
) -> Iterator[str]:
    """``text`` in pieces of at most ``limit`` characters, cut where ``rule`` allows, so the
    exact counts of the pieces add up to the count of the whole.

    ``keep``: sorted, non-overlapping ``(start, end)`` spans never cut inside nor at their edges
    (the added tokens in ``text``: ``<|im_end|>`` holds a letter-then-``_`` cut). Where the
    ``search`` characters before the limit hold no cut (one pre-tokenizer piece longer than
    that, e.g. 10 MB of spaces), the text is cut at the limit: memory stays bounded, and the sum
    may then differ from the whole by a token or so per such cut.
    """
    starts = [span[0] for span in keep]

    def kept(i: int) -> bool:
        at = bisect.bisect_right(starts, i) - 1
        return at >= 0 and keep[at][1] >= i

    start = 0
    while len(text) - start > limit:
        end = start + limit
        floor = max(start + 1, end - search)
        cuts = (i for i in range(end, floor, -1) if rule(text[i - 1], text[i]) and not kept(i))
        cut = next(cuts, None)
        if cut is None:  # forced at the limit, though never inside an added token
            cut = end
            if kept(end):
                token_start, token_end = keep[bisect.bisect_right(starts, end) - 1]
                cut = token_start if token_start > start else max(token_end, start + 1)
        yield text[start:cut]
        start = cut
    yield text[start:]
