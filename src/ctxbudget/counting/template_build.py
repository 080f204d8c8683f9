"""A message's loop text and its pieces from its proven shape (``template_shape``): a function of
its content per shape, the literal parts cut into pieces once, so neither Jinja nor a scan runs."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxbudget.counting.template_shape import BodyShapes, Content, Shape
from ctxbudget.messages.model import alike
from ctxbudget.tokens.registry import ExactTokenizer

MAX_PREFIX_CHARS = 200_000
"""Characters of the added tokens' proper prefixes past which a ``Splitter`` cuts nothing (its
prefix set holds them all, and a literal's end is looked up once per character of the longest
token): a proven text's pieces are then found by a scan. Real folders have a few thousand; a
hostile one with a 20,000-character token would need 200 MB."""
MAX_SHAPES = 256
"""Shapes kept per loop; past it, new shapes go to Jinja (a field read by value, unique per
message, would otherwise learn a shape per message)."""


Cut = tuple[str, tuple[str, ...], str] | None
"""A literal part's pieces: the text before its first added token cut at, the pieces from
there to its last one, the text after; None for a content part or a literal with no cut."""


class Splitter:
    """Where a shape's text is cut into pieces (``ExactTokenizer.pieces``) without scanning it.

    The tokenizer's pattern matches literal added tokens, each from where it starts. When the
    content's text holds no character an added token starts with, and no end of a literal part
    could begin a longer token, every match lies inside one literal part and is found by
    cutting that part alone: the message's pieces are the literals' pieces with the content
    joined to its neighbours.
    """

    def __init__(self, tokenizer: ExactTokenizer) -> None:
        tokens = tokenizer.added_tokens
        self.pieces = tokenizer.pieces
        self.is_cut = tokenizer.is_cut_token
        self.usable = sum(len(t) * (len(t) - 1) // 2 for t in tokens) <= MAX_PREFIX_CHARS
        starts = sorted({t[0] for t in tokens})
        self.start = starts[0] if len(starts) == 1 else None
        self.find = re.compile(f"[{''.join(map(re.escape, starts))}]").search if starts else None
        self.longest = max(map(len, tokens), default=0)
        self._tokens = tokens

    @functools.cached_property
    def open(self) -> frozenset[str]:
        """Every proper prefix of an added token, made when a first shape is cut."""
        return frozenset(t[:k] for t in self._tokens for k in range(1, len(t)))

    def cuts(self, parts: tuple[str | Content, ...]) -> tuple[Cut, ...] | None:
        """Each part's ``Cut``; None when a literal's end could begin a token (or no splitter)."""
        if not self.usable:
            return None
        out: list[Cut] = []
        for part in parts:
            if type(part) is not str:
                out.append(None)
                continue
            ends = range(max(0, len(part) - self.longest), len(part))
            if any(part[k:] in self.open for k in ends):  # could begin a token: scan instead
                return None
            pieces = self.pieces(part)
            at = [k for k, piece in enumerate(pieces) if self.is_cut(piece)]
            if not at:
                out.append(None)
                continue
            first, last = at[0], at[-1]
            out.append(
                (
                    "".join(pieces[:first]),
                    tuple(pieces[first : last + 1]),
                    "".join(pieces[last + 1 :]),
                )
            )
        return tuple(out)

    def clean(self, text: str) -> bool:
        """True when no added token can start in ``text``."""
        if self.start is not None:
            return self.start not in text
        return self.find is None or self.find(text) is None


@functools.lru_cache(maxsize=16)
def splitter(tokenizer: ExactTokenizer) -> Splitter:
    """The tokenizer's ``Splitter``, made once (its prefix set costs a pass over the tokens)."""
    return Splitter(tokenizer)


def _joined_pieces(values: list[str], cuts: tuple[Cut, ...]) -> list[str]:
    """The pieces of ``"".join(values)``, each literal cut as ``cuts`` says."""
    out: list[str] = []
    text = ""
    for value, cut in zip(values, cuts, strict=True):
        if cut is None:
            text += value
            continue
        lead, inner, tail = cut
        text += lead
        if text:
            out.append(text)
        out += inner
        text = tail
    if text:
        out.append(text)
    return out


Built = tuple[str, list[str] | None]
"""A message's loop text, and its pieces where they are known without a scan."""


@dataclass(slots=True)
class ShapeTexts:
    """The shapes learnt for one loop, valid for one set of values from before the loop."""

    rule: BodyShapes
    splitter: Splitter | None = None
    known: dict[tuple[Any, ...], Callable[[str, int], Built | None] | None] = field(
        default_factory=dict
    )
    """Each shape's builder (``_builder``) by key; None for a shape not proven."""
    outer: Sequence[Any] | None = None

    def use(self, outer: Sequence[Any]) -> None:
        """Forget the shapes when the values from before the loop changed (type and value)."""
        old = self.outer
        if not same_values(old, outer):
            self.known.clear()
            self.outer = kept_values(outer)

    def text(self, message: Any, i: int, n: int, limit: int) -> Built | None:
        """The body's text for ``message`` at ``i`` of ``n`` (and its pieces where they are
        known without a scan); None when Jinja must render it. ``limit``: the sandbox's
        longest value now."""
        if type(message) is not dict:
            return None
        content = message.get("content")
        if type(content) is not str:
            return None
        key = self.rule.key(message, content, i, n)
        try:
            build = self.known[key]
        except KeyError:
            build = self._learn(key, message, i, n)
        except TypeError:  # a field whose value is a list (tool_calls): no key
            return None
        return None if build is None else build(content, limit)

    def _learn(
        self, key: tuple[Any, ...], message: dict[str, Any], i: int, n: int
    ) -> Callable[[str, int], Built | None] | None:
        if len(self.known) >= MAX_SHAPES or self.outer is None:
            return None
        shape = self.rule.walk(message, i, n, self.outer)
        build = None if shape is None else _builder(shape, self.splitter)
        self.known[key] = build
        return build


def _builder(shape: Shape, splitter: Splitter | None) -> Callable[[str, int], Built | None]:
    """A function of a message's content giving its text (and pieces) for ``shape``; the usual
    shape, literal + content through at most one function + literal, has its own."""
    cuts = splitter.cuts(shape.parts) if splitter is not None else None
    parts, growth, fixed = shape.parts, shape.growth, shape.fixed
    if splitter is None or cuts is None:

        def plain(content: str, limit: int) -> Built | None:
            values = shape.values(content, limit)
            return None if values is None else ("".join(values), None)

        return plain
    clean, found = splitter.clean, cuts
    if not (len(parts) == 3 and cuts[0] and cuts[2] and type(parts[1]) is Content):

        def general(content: str, limit: int) -> Built | None:
            values = shape.values(content, limit)
            if values is None:
                return None
            text = "".join(values)
            for value, cut in zip(values, found, strict=True):
                if cut is None and value and not clean(value):
                    return text, None
            return text, _joined_pieces(values, found)

        return general
    before, middle, after = parts
    (a_lead, a_inner, a_tail), (c_lead, c_inner, c_tail) = cuts[0], cuts[2]
    head = [*([a_lead] if a_lead else []), *a_inner]
    tail = [*c_inner, *([c_tail] if c_tail else [])]
    steps = middle.steps  # type: ignore[union-attr]
    step = steps[0] if len(steps) == 1 else middle.apply  # type: ignore[union-attr]
    start = splitter.start

    def usual(content: str, limit: int) -> Built | None:
        if len(content) * growth + fixed > limit:
            return None
        value = step(content) if steps else content
        text = before + value + after  # type: ignore[operator]
        if (start in value) if start is not None else not clean(value):
            return text, None
        joined = a_tail + value + c_lead
        return text, [*head, joined, *tail] if joined else [*head, *tail]

    return usual


def kept_values(outer: Sequence[Any]) -> Sequence[Any]:
    """The values from before the loop, to keep for the next step's ``same_values``: a tuple
    (a frame's) as it is, since it cannot change; any other sequence copied."""
    return outer if type(outer) is tuple else list(outer)


def same_values(old: Sequence[Any] | None, new: Sequence[Any]) -> bool:
    """The values a loop body reads from before the loop render as they did: each ``alike``
    the one before (a float: ``-0.0 == 0.0``; a list or dict: ``[True] == [1]``)."""
    if old is new:
        return True  # a frame's very tuple: most steps
    if old is None or len(old) != len(new):
        return False
    if all(map(operator.is_, old, new)):  # the same objects, compared in C
        return True
    try:
        return all(map(alike, old, new))
    except Exception:  # a value whose == fails: not known the same
        return False
