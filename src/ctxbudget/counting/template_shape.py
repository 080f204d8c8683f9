"""Prove from a loop body's AST what it renders for each shape of message (the fields it reads,
whether its content is empty, its position flags): literal text around the content through known
functions, every test decided by the shape. Unproven shapes are rendered by Jinja."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jinja2 import nodes
from jinja2.runtime import Undefined

from ctxbudget.counting.sandbox import dict_attribute

_ABSENT: Any = object()  # a field the message does not have (a key part, never a value)
_PLAIN = (str, int, float, bool, type(None))
_FILTERS = frozenset({"trim", "tojson"})
_METHODS = frozenset({"strip", "lstrip", "rstrip"})
# Tests that answer from a value's type alone: the same for every text.
_TYPE_TESTS = frozenset(
    {"defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number"}
    | {"integer", "float", "boolean", "true", "false", "callable"}
)
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}
_GROWTH = {"tojson": 6}  # json.dumps of a text: 6 characters a character at most (\u001f)


class _Unproven(Exception):
    """The path does something the walk does not model."""


@dataclass(frozen=True, slots=True)
class Content:
    """The message's content through ``steps``: filters and methods, in the order applied."""

    steps: tuple[Callable[[str], str], ...] = ()
    growth: int = 1
    """At most how many characters a character of the content becomes."""

    def then(self, step: Callable[[str], str], growth: int = 1) -> Content:
        return Content((*self.steps, step), self.growth * growth)

    def apply(self, content: str) -> str:
        for step in self.steps:
            content = step(content)
        return content


@dataclass(frozen=True, slots=True)
class _Text:
    """A text made of literal parts and the content through functions."""

    parts: tuple[str | Content, ...]


_RAW = _Text((Content(),))


@dataclass(frozen=True, slots=True)
class Shape:
    """What the body renders for every message of one shape."""

    parts: tuple[str | Content, ...]
    growth: int
    """The content's characters in every text the path makes, each counted by its growth."""
    fixed: int
    """Characters of the literal text in every text the path makes."""

    def values(self, content: str, limit: int) -> list[str] | None:
        """The body's text for ``content``, part by part; None when a text the path makes
        could pass the sandbox's ``limit`` on a value's size (Jinja then decides)."""
        if len(content) * self.growth + self.fixed > limit:
            return None
        return [p if type(p) is str else p.apply(content) for p in self.parts]  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class BodyShapes:
    """A loop body and what of a message it can read: the static half of the proof."""

    body: tuple[Any, ...]
    target: str
    fields: tuple[str, ...]
    """The message's fields the body names, content aside (a shape's key holds their values)."""
    outer: tuple[str, ...]
    first: bool
    last: bool
    assigned: frozenset[str]
    env: Any = field(repr=False, compare=False)
    absent: tuple[Any, ...] = ()
    """``_ABSENT`` once a field: the default of each field's read in a key."""

    def key(self, message: dict[str, Any], content: str, i: int, n: int) -> tuple[Any, ...]:
        """What the body can read of ``message`` at ``i`` of ``n``, besides its content's text."""
        return (
            *map(message.get, self.fields, self.absent),
            bool(content),
            self.first and i == 0,
            self.last and i == n - 1,
        )

    def walk(self, message: dict[str, Any], i: int, n: int, outer: Sequence[Any]) -> Shape | None:
        """The shape of ``message`` at ``i`` of ``n``, proven over the body; None if unproven."""
        walker = _Walker(self, message, i, n, dict(zip(self.outer, outer, strict=True)))
        try:
            out = walker.statements(self.body, {})
        except _Unproven:
            return None
        except Exception:  # a Known value Python refuses (a comparison, a filter): Jinja decides
            return None
        parts = _merged(out)
        # The output is a value too, and prints a value made once as often as the body says.
        printed = sum(part.growth for part in parts if type(part) is Content)
        literal = sum(len(part) for part in parts if type(part) is str)
        return Shape(parts, walker.growth + printed, walker.fixed + literal)


def body_shapes(
    env: Any, body: list[Any], target: str, outer: tuple[str, ...]
) -> BodyShapes | None:
    """The static half of the proof for a loop body, or None when the body rebinds the names the
    walk reads (``message``, ``loop``, ``messages``)."""
    found = [n for node in body for n in (node, *node.find_all(nodes.Node))]
    assigned = {n.name for n in found if isinstance(n, nodes.Name) and n.ctx != "load"}
    if assigned & {target, "loop", "messages"}:
        return None
    names: set[str] = set()
    for node in found:
        if isinstance(node, nodes.Getattr) and _is(node.node, target):
            names.add(node.attr)
        elif isinstance(node, nodes.Getitem) and _is(node.node, target):
            if isinstance(node.arg, nodes.Const) and type(node.arg.value) is str:
                names.add(node.arg.value)
        elif (
            isinstance(node, nodes.Compare)
            and isinstance(node.expr, nodes.Const)
            and type(node.expr.value) is str
            and any(_is(o.expr, target) for o in node.ops)
        ):
            names.add(node.expr.value)
    attrs = {n.attr for n in found if isinstance(n, nodes.Getattr) and _is(n.node, "loop")}
    fields = tuple(sorted(names - {"content"}))
    return BodyShapes(
        body=tuple(body),
        target=target,
        fields=fields,
        absent=(_ABSENT,) * len(fields),
        outer=outer,
        first="first" in attrs,
        last="last" in attrs,
        assigned=frozenset(assigned),
        env=env,
    )


def _is(node: Any, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.name == name


def _merged(parts: list[str | Content]) -> tuple[str | Content, ...]:
    out: list[str | Content] = []
    for part in parts:
        if type(part) is str and out and type(out[-1]) is str:
            out[-1] += part
        elif part != "":
            out.append(part)
    return tuple(out)


class _Walker:
    """One walk of the body for one shape: each node on its path evaluated as Jinja would, or
    refused. Every value a test reads comes from the shape, so all messages of the shape take
    this path, and their texts differ only where the content is printed."""

    def __init__(
        self, rule: BodyShapes, message: dict[str, Any], i: int, n: int, outer: dict[str, Any]
    ) -> None:
        self.rule, self.message, self.i, self.n, self.outer = rule, message, i, n, outer
        self.growth = 0
        self.fixed = 0

    def statements(self, body: Any, scope: dict[str, Any]) -> list[str | Content]:
        out: list[str | Content] = []
        for node in body:
            if isinstance(node, nodes.Output):
                for child in node.nodes:
                    if isinstance(child, nodes.TemplateData):
                        out.append(self._made(child.data))
                    else:
                        out += self._as_text(self.expr(child, scope)).parts
            elif isinstance(node, nodes.If):
                out += self.statements(self._branch(node, scope), scope)
            elif isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name):
                scope[node.target.name] = self.expr(node.node, scope)
            elif isinstance(node, nodes.Scope):  # {% generation %}: its sets stay inside
                out += self.statements(node.body, dict(scope))
            else:
                raise _Unproven(type(node).__name__)
        return out

    def _branch(self, node: Any, scope: dict[str, Any]) -> Any:
        if self._truth(self.expr(node.test, scope)):
            return node.body
        for elif_ in node.elif_:
            if self._truth(self.expr(elif_.test, scope)):
                return elif_.body
        return node.else_

    def _made(self, text: str) -> str:
        self.fixed += len(text)
        return text

    def _text(self, parts: tuple[str | Content, ...]) -> _Text:
        """A content-derived value, counted for the size bound (``Shape.values``)."""
        for part in parts:
            if type(part) is str:
                self.fixed += len(part)
            else:
                self.growth += part.growth  # type: ignore[union-attr]
        return _Text(parts)

    def _as_text(self, value: Any) -> _Text:
        """``value`` as output or concatenated text: Jinja's ``str(value)``."""
        if isinstance(value, _Text):
            return value
        if type(value) not in _PLAIN and not isinstance(value, Undefined):
            raise _Unproven("a value that is not plain")
        return _Text((self._made(str(value)),))

    def _truth(self, value: Any) -> bool:
        if not isinstance(value, _Text):
            return bool(value)
        if value == _RAW:  # the shape says whether the content is empty
            return bool(self.message["content"])
        raise _Unproven("the truth of a text made from the content")

    def _field(self, name: str) -> Any:
        if name == "content":
            return self._text(_RAW.parts)
        if dict_attribute(name):  # message.items: Jinja gives the dict's method
            raise _Unproven("a dict method")
        value = self.message.get(name, _ABSENT)
        if value is _ABSENT:
            return self.rule.env.undefined(name=name)
        if type(value) is not str:
            raise _Unproven("a field that is not text")
        self.fixed += len(value)
        return value

    def _name(self, name: str, scope: dict[str, Any]) -> Any:
        if name in scope:
            return scope[name]
        if name in self.rule.assigned or name not in self.outer:
            raise _Unproven(f"the name {name}")
        value = self.outer[name]
        if type(value) not in _PLAIN and not isinstance(value, Undefined):
            raise _Unproven(f"the name {name}")
        return value

    def expr(self, node: Any, scope: dict[str, Any]) -> Any:
        target = self.rule.target
        if isinstance(node, nodes.Const) and type(node.value) in _PLAIN:
            return node.value
        if isinstance(node, nodes.Getattr) and _is(node.node, target):
            return self._field(node.attr)
        if isinstance(node, nodes.Getitem) and _is(node.node, target):
            if isinstance(node.arg, nodes.Const) and type(node.arg.value) is str:
                return self._field(node.arg.value)
            raise _Unproven("a computed key")
        if isinstance(node, nodes.Getattr) and _is(node.node, "loop"):
            if node.attr == "first":
                return self.i == 0
            if node.attr == "last":
                return self.i == self.n - 1
            raise _Unproven(f"loop.{node.attr}")
        if isinstance(node, nodes.Name) and node.name not in (target, "loop", "messages"):
            return self._name(node.name, scope)
        if isinstance(node, nodes.Compare):
            return self._compare(node, scope)
        if isinstance(node, nodes.Not):
            return not self._truth(self.expr(node.node, scope))
        if isinstance(node, nodes.And | nodes.Or):
            left = self.expr(node.left, scope)
            if self._truth(left) == isinstance(node, nodes.Or):
                return left
            return self.expr(node.right, scope)
        if isinstance(node, nodes.CondExpr) and node.expr2 is not None:
            chosen = node.expr1 if self._truth(self.expr(node.test, scope)) else node.expr2
            return self.expr(chosen, scope)
        if isinstance(node, nodes.Add):
            return self._add(self.expr(node.left, scope), self.expr(node.right, scope))
        if isinstance(node, nodes.Concat):
            parts = [self._as_text(self.expr(n, scope)).parts for n in node.nodes]
            return self._joined([p for part in parts for p in part])
        if isinstance(node, nodes.Test | nodes.Filter) and _bare(node):
            return self._apply(node, self.expr(node.node, scope))
        if isinstance(node, nodes.Call):
            return self._call(node, scope)
        raise _Unproven(type(node).__name__)

    def _compare(self, node: Any, scope: dict[str, Any]) -> Any:
        if len(node.ops) != 1 or node.ops[0].op not in _COMPARE:
            raise _Unproven("a comparison")
        op = node.ops[0]
        if _is(op.expr, self.rule.target):  # 'tool_calls' in message: a field the key holds
            name = node.expr
            if (
                op.op in ("in", "notin")
                and isinstance(name, nodes.Const)
                and type(name.value) is str
            ):
                return _COMPARE[op.op](name.value, self.message)
            raise _Unproven("a comparison with the message")
        left, right = self.expr(node.expr, scope), self.expr(op.expr, scope)
        if isinstance(left, _Text) or isinstance(right, _Text):
            raise _Unproven("a comparison with the content")
        return _COMPARE[op.op](left, right)

    def _add(self, left: Any, right: Any) -> Any:
        """Jinja's ``+`` (the sandbox's ``call_binop``) of two texts: concatenated."""
        if type(left) is str and type(right) is str:
            return self._made(left + right)
        if type(left) in (str, _Text) and type(right) in (str, _Text):
            return self._joined([*self._as_text(left).parts, *self._as_text(right).parts])
        raise _Unproven("a sum that is not of texts")

    def _joined(self, parts: list[str | Content]) -> Any:
        if all(type(p) is str for p in parts):
            return self._made("".join(parts))  # type: ignore[arg-type]
        return self._text(tuple(parts))

    def _apply(self, node: Any, value: Any) -> Any:
        env = self.rule.env
        if isinstance(node, nodes.Test):
            if node.name not in _TYPE_TESTS:
                raise _Unproven(f"the test {node.name}")
            return env.tests[node.name]("" if isinstance(value, _Text) else value)
        if node.name not in _FILTERS:
            raise _Unproven(f"the filter {node.name}")
        # Jinja's trim is ``soft_str(value).strip()``: on a text, ``str.strip`` (the sandbox's
        # size check is the shape's bound); tojson is the environment's own function.
        function = str.strip if node.name == "trim" else env.filters[node.name]
        self.fixed += 2 if node.name == "tojson" else 0  # its quotes
        if type(value) is str:
            return self._made(function(value))
        return self._step(value, function, _GROWTH.get(node.name, 1))

    def _step(self, value: Any, step: Callable[[str], str], growth: int) -> _Text:
        """The content alone through one more function."""
        if not (isinstance(value, _Text) and len(value.parts) == 1):
            raise _Unproven("a function of more than the content")
        content = value.parts[0]
        assert isinstance(content, Content)
        return self._text((content.then(step, growth),))

    def _call(self, node: Any, scope: dict[str, Any]) -> Any:
        """A text's ``strip`` / ``lstrip`` / ``rstrip`` with at most one literal argument."""
        method = node.node
        args = node.args
        if not (
            isinstance(method, nodes.Getattr)
            and method.attr in _METHODS
            and not (node.kwargs or node.dyn_args or node.dyn_kwargs)
            and len(args) <= 1
            and all(isinstance(a, nodes.Const) and type(a.value) is str for a in args)
        ):
            raise _Unproven("a call")
        value = self.expr(method.node, scope)
        step = operator.methodcaller(method.attr, *(a.value for a in args))
        if type(value) is str:
            return self._made(step(value))
        return self._step(value, step, 1)


def _bare(node: Any) -> bool:
    """A filter or test with no arguments, on a value (not a ``{% filter %}`` block)."""
    return node.node is not None and not (
        node.args or node.kwargs or node.dyn_args or node.dyn_kwargs
    )
