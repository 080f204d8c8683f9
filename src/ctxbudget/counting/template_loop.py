"""Render a chat template's message loop one message at a time, keeping each message's text.

Most templates are a head, one ``{% for message in messages %}`` whose body reads only the
message, its position (``loop.index0``, ``loop.first``, ``loop.last`` ...), near neighbours
(``messages[loop.index0 + 1]``) and variables set before the loop, then a tail. Such a template
is rewritten so the loop calls back into Python with its body as a macro: a message whose inputs
cannot have changed keeps its text and count, so a step renders and tokenises what changed; a
message whose text the body's AST proves (``template_shape``) is not rendered at all.
Other templates are rendered whole (``TemplateScheme``'s general path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxbudget.counting.result import RunningCounts
from ctxbudget.counting.sandbox import value_limit
from ctxbudget.counting.template_build import ShapeTexts, Splitter, kept_values, same_values
from ctxbudget.counting.template_shape import BodyShapes, body_shapes
from ctxbudget.messages.model import same

LOOP_MARKER = "\ue000ctxbudget-loop\ue001"  # private-use characters: never in a template
_BODY, _LOOP = "ctxbudget_loop_body", "ctxbudget_loop"
_POSITION = frozenset({"index0", "index", "first", "previtem"})
_END = frozenset({"last", "length", "revindex", "revindex0", "nextitem"})
_LENGTH = frozenset({"length", "revindex", "revindex0"})  # the body reads the loop's length
_RESERVED = frozenset({"caller", "varargs", "kwargs", _BODY, _LOOP})
_ORDER = frozenset({"eq", "ne", "lt", "lteq", "gt", "gteq"})
_CHANGING = frozenset({"strftime_now", "lipsum", "cycler", "joiner"})  # clock, random, state


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """A template rewritten around its message loop, and what the loop body depends on."""

    template: Any
    outer: tuple[str, ...]
    """Variables the body reads from before the loop, passed to it in this order."""
    loop_attrs: frozenset[str]
    before: int
    """How far back the body looks (``messages[loop.index0 - before]``)."""
    after: int
    """How far ahead it looks (``messages[loop.index0 + after]``)."""
    deterministic: bool = True
    """False when the template draws random text (``lipsum``, ``|random``): its head and tail
    are then rendered every time (``template_frame``)."""
    length_cuts: frozenset[int] | None = None
    """Where the template's use of ``messages | length`` can change: every use compares it with
    one of these constants (``!= 0``), 0 and 1 included for a bare ``if messages``; None when
    a use is anything else (printed, added to), so the exact length matters."""
    shapes: BodyShapes | None = None
    """The body, for building a message's text without Jinja (``template_shape``)."""


@dataclass(frozen=True, slots=True)
class FakeLoop:
    """What the body sees as ``loop``: Jinja's ``LoopContext`` position attributes and its
    neighbours (``previtem``, ``nextitem``: undefined past either end, as Jinja's are)."""

    index0: int
    length: int
    items: Any = field(default=None, repr=False)

    @property
    def previtem(self) -> Any:
        from jinja2.runtime import Undefined

        if self.index0 == 0:
            return Undefined(hint="there is no previous item")
        return self.items[self.index0 - 1]

    @property
    def nextitem(self) -> Any:
        from jinja2.runtime import Undefined

        if self.index0 + 1 >= self.length:
            return Undefined(hint="there is no next item")
        return self.items[self.index0 + 1]

    @property
    def index(self) -> int:
        return self.index0 + 1

    @property
    def first(self) -> bool:
        return self.index0 == 0

    @property
    def last(self) -> bool:
        return self.index0 == self.length - 1

    @property
    def revindex(self) -> int:
        return self.length - self.index0

    @property
    def revindex0(self) -> int:
        return self.length - self.index0 - 1


def _offset(arg: Any) -> int | None:
    """``k`` for ``loop.index0``, ``loop.index0 + k`` or ``loop.index0 - k``; else None."""
    from jinja2 import nodes

    def is_index0(node: Any) -> bool:
        loop = isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name)
        return loop and node.node.name == "loop" and node.attr == "index0"

    if is_index0(arg):
        return 0
    if isinstance(arg, nodes.Add | nodes.Sub) and is_index0(arg.left):
        right = arg.right
        if isinstance(right, nodes.Const) and type(right.value) is int:
            return right.value if isinstance(arg, nodes.Add) else -right.value
    return None


def _analyse(body: list[Any], target: str) -> tuple[tuple[str, ...], frozenset[str], int, int]:
    """What the body depends on; raises ValueError when it is not one message's rendering."""
    from jinja2 import nodes

    found: list[Any] = [n for node in body for n in (node, *node.find_all(nodes.Node))]
    stateful = nodes.NSRef | nodes.Break | nodes.Continue | nodes.Macro | nodes.CallBlock
    if any(isinstance(n, stateful) for n in found):
        raise ValueError("the body keeps state across messages")
    inner = [n for f in found if isinstance(f, nodes.For) for n in f.find_all(nodes.Name)]
    if any(n.name == "messages" for n in inner):  # its loop.index0 is the inner loop's
        raise ValueError("a nested loop reads messages")
    loop_attrs = {
        n.attr for n in found if isinstance(n, nodes.Getattr) and _is_name(n.node, "loop")
    }
    uses = [n for n in found if isinstance(n, nodes.Name) and n.ctx == "load"]
    if (
        sum(n.name == "loop" for n in uses)
        != sum(isinstance(n, nodes.Getattr) and _is_name(n.node, "loop") for n in found)
        or not loop_attrs <= _POSITION | _END
    ):
        raise ValueError("the body uses the loop object itself")
    offsets = [_offset(n.arg) for n in found if isinstance(n, nodes.Getitem) and _is_name(n.node)]
    if None in offsets or len(offsets) != sum(n.name == "messages" for n in uses):
        raise ValueError("the body reads messages other than its neighbours")
    names = sorted({n.name for n in uses} - {target, "loop", "messages"})
    if _RESERVED & {*names, target}:
        raise ValueError("the body uses a macro's reserved names")
    if _CHANGING & {*names}:
        raise ValueError("the body's text may change between renders of the same input")
    steps = [o for o in offsets if o is not None]
    ahead = [1] if "nextitem" in loop_attrs else []  # previtem needs nothing: it never wraps
    return (
        tuple(names),
        frozenset(loop_attrs),
        max([-o for o in steps if o < 0], default=0),
        max([o for o in steps if o > 0] + ahead, default=0),
    )


def _is_name(node: Any, name: str = "messages") -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Name) and node.name == name


@functools.lru_cache(maxsize=32)
def plan_loop(source: str) -> LoopPlan | None:
    """The template rewritten around its last top-level ``for`` over ``messages``, or None."""
    from jinja2 import nodes

    from ctxbudget.counting.hf import compile_template, environment
    from ctxbudget.counting.sandbox import bound_template

    compile_template(source)  # the template's own errors first, as the general path gives them
    env = environment()
    try:
        tree = env.parse(source)
    except Exception:
        return None
    loops = [
        i
        for i, node in enumerate(tree.body)
        if isinstance(node, nodes.For)
        and _is_name(node.iter)
        and isinstance(node.target, nodes.Name)
        and not (node.else_ or node.test or node.recursive)
    ]
    if not loops:
        return None
    at = loops[-1]
    loop = tree.body[at]
    try:
        outer, attrs, before, after = _analyse(loop.body, loop.target.name)
    except ValueError:
        return None
    shapes = body_shapes(env, loop.body, loop.target.name, outer)
    params = [nodes.Name(n, "param") for n in (loop.target.name, "loop", "messages", *outer)]
    macro = nodes.Macro(_BODY, params, [], loop.body)
    args: list[nodes.Expr] = [nodes.Name("messages", "load"), nodes.Name(_BODY, "load")]
    args.append(nodes.List([nodes.Name(n, "load") for n in outer]))
    call = nodes.Output([nodes.Call(nodes.Name(_LOOP, "load"), args, [], None, None)])
    tree.body[at : at + 1] = [macro, call]
    tree.set_environment(env)
    try:
        code = env.compile(tree)
        template = bound_template(env.template_class.from_code(env, code, env.make_globals(None)))
    except Exception:
        return None
    random = any(n.name == "lipsum" for n in tree.find_all(nodes.Name)) or any(
        n.name == "random" for n in tree.find_all(nodes.Filter)
    )
    cuts = _length_cuts(tree)
    return LoopPlan(
        template,
        outer,
        attrs,
        before,
        after,
        deterministic=not random,
        length_cuts=cuts,
        shapes=shapes,
    )


def _length_cuts(tree: Any) -> frozenset[int] | None:
    """``LoopPlan.length_cuts`` of a parsed template whose loop is now the ``_BODY`` macro.

    Any list the head or tail holds may be ``messages`` or a slice of it under another name
    (``loop_messages``), so every ``| length`` / ``| count`` outside the body must be compared
    with an integer constant; the body sees plain lists, its lengths are its own.
    """
    from jinja2 import nodes

    def is_length(node: Any) -> bool:
        return isinstance(node, nodes.Filter) and node.name in ("length", "count")

    outside = [n for n in tree.body if not (isinstance(n, nodes.Macro) and n.name == _BODY)]
    found = [f for node in outside for f in (node, *node.find_all(nodes.Node))]
    uses = sum(is_length(n) for n in found)
    cuts = {0, 1}
    for compare in (n for n in found if isinstance(n, nodes.Compare) and len(n.ops) == 1):
        pair = (compare.expr, compare.ops[0].expr)
        if compare.ops[0].op not in _ORDER:
            continue
        for side, other in (pair, pair[::-1]):
            if is_length(side) and isinstance(other, nodes.Const) and type(other.value) is int:
                cuts.update((other.value, other.value + 1))
                uses -= 1
    return frozenset(cuts) if uses == 0 else None


Measure = Callable[[str, list[str] | None], tuple[int, tuple[bool, bool]]]
"""A text's token count (from its pieces, when known) and whether it starts / ends with an
added token the tokenizer cuts at."""


@dataclass(slots=True)
class LoopMemo:
    """The texts and counts of the last render's loop, by position, and what they came from."""

    plan: LoopPlan
    measure: Measure
    splitter: Splitter | None = None
    """Cuts the texts built from a proven shape into pieces."""
    outer: Sequence[Any] | None = None
    texts: list[str] = field(default_factory=list)
    counts: RunningCounts = field(default_factory=RunningCounts)
    edges: list[tuple[bool, bool]] = field(default_factory=list)
    """Whether each text starts / ends with an added token the tokenizer cuts at."""
    bad: set[int] = field(default_factory=set)
    """Positions ``i`` where text ``i - 1`` meets text ``i`` without such a token."""
    joins: dict[int, tuple[tuple[str, ...], int]] = field(default_factory=dict)
    """Per run of texts that meet without such a token, by its first position: its texts and
    how many tokens the joined text has beyond their own counts (``join_fixes``)."""
    seen: tuple[int, int] | None = None
    """The message list's version and where the loop's list started in it, at the last run
    (``PieceCache.kept_in_loop``); None: unknown."""
    frame: Any = None
    """The last render's head and tail (``template_frame.Frame``), when they may be reused."""
    shapes: ShapeTexts | None = field(init=False, default=None)
    """The texts built from the body's proven shapes."""

    def __post_init__(self) -> None:
        if self.plan.shapes is not None:
            self.shapes = ShapeTexts(self.plan.shapes, self.splitter)

    def run(
        self,
        messages: list[Any],
        body: Any,
        outer: Sequence[Any],
        known: int = 0,
        guard: Callable[[Callable[[], None]], None] | None = None,
    ) -> str:
        """The ``ctxbudget_loop`` function the rewritten template calls (and a step calls
        outside a render): each message's text and count kept by position. ``known``: how many
        leading items of ``messages`` are the very items of the last run (the request's kept
        prefix): only what follows them is rendered. A caller outside a render passes
        ``guard``, which runs the bodies Jinja must render within the sandbox's bounds (texts
        built from a proven shape need none)."""
        plan, n = self.plan, len(messages)
        start = self._first_stale(n, outer, known)
        self.outer = None  # until this render ends: a template that fails midway
        # (raise_exception) leaves texts the next one must redo
        if n < len(self.texts):
            self.counts.cut(n)
            del self.texts[n:], self.edges[n:]
        early = range(min(plan.before, start))  # messages[-1] of the first ones wraps
        changed = [*early, *range(start, n)]
        self._store(changed, _texts(plan, self.shapes, changed, messages, body, outer, guard), n)
        self.outer = kept_values(outer)
        return LOOP_MARKER

    def _store(self, changed: list[int], made: list[tuple[str, list[str] | None]], n: int) -> None:
        """Measure the texts ``made`` for the ``changed`` positions (in order) and keep them,
        with where they meet their neighbours, in a loop of ``n`` texts."""
        texts, counts, edges, measure = self.texts, self.counts, self.edges, self.measure
        for i, (text, pieces) in zip(changed, made, strict=True):
            tokens, edge = measure(text, pieces)
            counts.put(i, tokens)
            if i < len(texts):
                texts[i], edges[i] = text, edge
            else:
                texts.append(text)
                edges.append(edge)
        self._mark_joins(changed, n)

    def _mark_joins(self, changed: list[int], n: int) -> None:
        """Mark the texts that meet the text before them without an added token between. An
        empty text (a system prompt the head renders) is no text: the texts that meet are the
        non-empty texts around it."""
        texts, edges = self.texts, self.edges
        if self.bad:
            self.bad = {i for i in self.bad if i < n}
        todo = set(changed)
        for c in changed:
            if c + 1 not in todo:  # the next non-empty text now meets another one
                j = c + 1
                while j < n and not texts[j]:
                    j += 1
                todo.add(j)
        for i in todo:
            if i >= n:
                continue
            self.bad.discard(i)
            p = i - 1
            while p >= 0 and not texts[p]:
                p -= 1
            if texts[i] and p >= 0 and not (edges[p][1] or edges[i][0]):
                self.bad.add(i)

    def ends(self) -> tuple[int, int] | None:
        """The first and last non-empty texts; None when every text is empty."""
        texts = self.texts
        if texts and texts[0] and texts[-1]:
            return 0, len(texts) - 1
        first = next((i for i, text in enumerate(texts) if text), None)
        if first is None:
            return None
        return first, next(i for i in range(len(texts) - 1, first - 1, -1) if texts[i])

    def join_fixes(self, tokens: Callable[[str], int]) -> dict[int, int]:
        """Where texts meet without an added token between (Hermes-2-Pro: two tool results,
        ``</tool_response>\n`` | ``<tool_response>``), the tokenizer sees them as one text:
        for each such run, by its last position, the tokens of the joined text (``tokens``)
        less the sum of its texts' own counts. A run whose texts are the same objects as last
        time keeps its fix."""
        texts, counts = self.texts, self.counts.items
        runs: list[tuple[int, int]] = []
        for i in sorted(self.bad):
            p = i - 1
            while p >= 0 and not texts[p]:
                p -= 1
            if runs and runs[-1][1] == p:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((p, i))
        joins: dict[int, tuple[tuple[str, ...], int]] = {}
        fixes: dict[int, int] = {}
        for first, last in runs:
            run = tuple(texts[first : last + 1])
            known = self.joins.get(first)
            if known is None or len(known[0]) != len(run) or not all(map(same, known[0], run)):
                extra = tokens("".join(run)) - sum(counts[first : last + 1])
                known = (run, extra)
            joins[first] = known
            fixes[last] = known[1]
        self.joins = joins
        return fixes

    def _first_stale(self, n: int, outer: Sequence[Any], known: int) -> int:
        """The first of ``n`` loop positions to render again, the first ``known`` items being
        the very items of the last run: the one after them, less how far ahead a body looks."""
        plan = self.plan
        if not same_values(self.outer, outer) or not plan.loop_attrs.isdisjoint(_LENGTH):
            return 0
        start = min(known, len(self.texts)) - plan.after
        if "last" in plan.loop_attrs and len(self.texts) != n:
            start = min(start, len(self.texts) - 1)
        return max(start, 0)


def _texts(
    plan: LoopPlan,
    shapes: ShapeTexts | None,
    changed: list[int],
    messages: list[Any],
    body: Any,
    outer: Sequence[Any],
    guard: Callable[[Callable[[], None]], None] | None,
) -> list[tuple[str, list[str] | None]]:
    """The loop texts of the ``changed`` positions, with their pieces where a proven shape
    gives them; a message with no proven shape is rendered by Jinja (within ``guard``)."""
    n = len(messages)
    made: list[tuple[str, list[str] | None] | None]
    if shapes is not None:
        shapes.use(outer)
        limit = value_limit()
        made = [shapes.text(messages[i], i, n, limit) for i in changed]
    else:
        made = [None] * len(changed)
    if None in made:
        slow = [k for k, text in enumerate(made) if text is None]
        looks = bool(plan.loop_attrs)  # a body that never reads ``loop`` needs none

        def render() -> None:
            for k in slow:
                i = changed[k]
                loop = FakeLoop(i, n, messages) if looks else None
                made[k] = (str(body(messages[i], loop, messages, *outer)), None)

        render() if guard is None else guard(render)
    return made  # type: ignore[return-value]
