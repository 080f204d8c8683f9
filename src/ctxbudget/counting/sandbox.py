"""A Jinja sandbox that bounds what untrusted template code may cost: time, memory, output.

Jinja's ``ImmutableSandboxedEnvironment`` blocks attribute escapes but not ``'x' * 10**9``,
``9 ** 999999``, ``lipsum(10**7)`` or nested loops. Here every operator, call, filter and
string join that can grow a value is checked before it runs, and a watchdog thread interrupts a
render that passes its deadline (it raises in the rendering thread, so pure-Python loops stop).

Compiling is bounded too: :func:`ctxbudget.counting.hf.compile_template` refuses a template
longer than ``MAX_TEMPLATE_CHARS``, larger than ``MAX_TEMPLATE_NODES`` or nested deeper than
``MAX_TEMPLATE_DEPTH``, and nothing of a template runs while it compiles (no constant folding:
see :class:`BoundedSandbox`).
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any, TypeVar

from jinja2 import Environment, nodes
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.ext import Extension
from jinja2.nodes import EvalContext
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ctxbudget.deadline import RenderTimeout
from ctxbudget.tokens.pieces import PIECE_CHARS
from ctxbudget.tokens.registry import TOKENIZE_SECONDS

DEFAULT_RENDER_SECONDS = 10.0
"""A render deadline: a 1M-token request renders in well under a second on one core."""
MAX_VALUE_CHARS = 8 * 2**20
"""Longest string or list a template may build beyond its input (8 Mi characters or items)."""
MAX_OUTPUT_CHARS = 64 * 2**20
"""Longest rendered prompt beyond twice the input text (a 1M-token prompt is ~5 Mi chars)."""
MAX_ITEMS = 200_000
"""Longest list or tuple a template may build beyond its input (``range`` stops at 100,000)."""
MAX_INT_BITS = 4096
"""Largest integer an operator may produce (``9 ** 999999`` is refused, ``2 ** 64`` is fine)."""
MAX_ARGUMENT = 1_000_000
"""Largest integer a call or filter may take (widths, counts, ``lipsum(n)``)."""

MAX_TEMPLATE_CHARS = 256 * 2**10
"""Longest template source (characters; bytes for ``chat_template.jinja``): 2.5 times the
largest known real ones (some Mistral and Qwen3.5 templates, under 100 KB; the 71 of llama.cpp's
``models/templates`` are all under 17 KB). Plain text costs little to compile; code is bounded
by ``MAX_TEMPLATE_NODES``."""
MAX_TEMPLATE_NODES = 32_768
"""Most nodes of Jinja's parse tree (each block, expression, name and text piece is one).
Compile time and memory grow with them (Python compiles the code Jinja writes for each): at
this limit the worst measured (``{{x}}`` repeated) took 1.8 s of CPU and 0.3 GB at peak. Real
templates have 100 to 1,300 (Kimi-K3's 15 KB the most of llama.cpp's 71; at most 140 a KB)."""
MAX_TEMPLATE_DEPTH = 64
"""Deepest nesting of blocks and expressions (nodes of Jinja's parse tree, the root counting
one): its parser and code generator recurse per level, and so does Python's ``compile``. Real
templates nest 12 to 29 deep (DeepSeek V3.2/V4 the deepest of llama.cpp's 71)."""

_T = TypeVar("_T")
_WIDTH = re.compile(r"\d{7,}")  # a format width/precision of a million or more


@dataclass(frozen=True, slots=True)
class Limits:
    """What one render may use; ``input_chars`` is the size of the data it is given."""

    seconds: float = DEFAULT_RENDER_SECONDS
    value_chars: int = MAX_VALUE_CHARS
    output_chars: int = MAX_OUTPUT_CHARS
    input_chars: int = 0

    @property
    def deadline(self) -> float:
        """``seconds``, plus the tokenizer's allowance for input of this size: a count tokenises
        its messages inside the render's deadline, so a 12 MB message (legitimate, if far past
        any window) must not fail where a small one passes. The allowance is the pace the
        tokenizer itself is held to (``TOKENIZE_SECONDS`` per ``PIECE_CHARS``): linear in the
        input, so still bounded."""
        return self.seconds + TOKENIZE_SECONDS * self.input_chars / PIECE_CHARS

    @property
    def max_value(self) -> int:
        return self.value_chars + self.input_chars

    @property
    def max_output(self) -> int:
        return self.output_chars + 2 * self.input_chars


_current = threading.local()
_DEFAULT = Limits()
_DEFAULT_MAX_VALUE = _DEFAULT.max_value


def _limits() -> Limits:
    limits: Limits | None = getattr(_current, "limits", None)
    return limits if limits is not None else _DEFAULT


def value_limit() -> int:
    """The longest string a template may build now: ``_limits().max_value``, kept as a number
    while a render runs (every string operator asks for it), else the default."""
    value: int = getattr(_current, "max_value", _DEFAULT_MAX_VALUE)
    return value


def _refuse(what: str) -> SecurityError:
    return SecurityError(f"{what} exceeds the template sandbox's limits")


def _check_size(value: Any) -> Any:
    if isinstance(value, str | bytes):
        limit = value_limit()
    elif isinstance(value, Sized) and not isinstance(value, dict):
        limit = MAX_ITEMS + _limits().input_chars  # each item is an object: far heavier
    else:
        return value
    if len(value) > limit:
        raise _refuse(f"a value of {len(value):,} items")
    return value


def _check_int(value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_ARGUMENT:
        raise _refuse(f"the argument {value}")


def _seq_len(value: Any) -> int | None:
    return len(value) if isinstance(value, str | list | tuple) else None


def _check_binop(operator: str, left: Any, right: Any) -> None:
    limit = _limits().max_value
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            size = _seq_len(seq)
            cap = limit if isinstance(seq, str) else MAX_ITEMS + _limits().input_chars
            if size is not None and isinstance(times, int) and size * times > cap:
                raise _refuse(f"a sequence of {size:,} x {times:,}")
        ints = isinstance(left, int) and isinstance(right, int)
        if ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise _refuse("an integer product")
    elif operator == "**" and isinstance(left, int) and isinstance(right, int):
        if right > 0 and abs(left) > 1 and left.bit_length() * right > MAX_INT_BITS:
            raise _refuse(f"{left} ** {right}")
    elif operator == "+":
        sizes = (_seq_len(left), _seq_len(right))
        if None not in sizes and sum(s or 0 for s in sizes) > limit:
            raise _refuse("a concatenation")
    elif operator == "%" and isinstance(left, str):
        if _WIDTH.search(left):
            raise _refuse("a format width")
        for arg in right if isinstance(right, tuple) else (right,):
            _check_int(arg)


def _check_format(text: str) -> None:
    if _WIDTH.search(text):
        raise _refuse("a format width")


def _check_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    for arg in (*args, *kwargs.values()):
        _check_int(arg)
    method = getattr(func, "__wrapped__", func)  # Jinja wraps str.format in the sandbox
    owner = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if isinstance(owner, str):
        if name in ("format", "format_map"):
            _check_format(owner)
        elif name == "replace" and len(args) >= 2:
            _check_replace(owner, args[0], args[1])
        elif name == "join" and args:
            _check_join(owner, args[0])


def _check_replace(text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if old else len(text) + 1
        if len(text) + hits * max(len(new) - len(old), 0) > _limits().max_value:
            raise _refuse("a replace")


def _check_join(separator: Any, items: Any) -> None:
    sized = isinstance(separator, str) and isinstance(items, Sized)
    if sized and len(separator) * len(items) > _limits().max_value:
        raise _refuse("a join")


_CONTEXTS = (Context, EvalContext, Environment)
_DICT_ATTRIBUTES = frozenset(dir(dict))


def dict_attribute(name: str) -> bool:
    """True when ``message.NAME`` gives a dict's own attribute (``items``), not its key."""
    return name in _DICT_ATTRIBUTES


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    checked = name in ("indent", "replace", "join", "format")

    def bounded(*args: Any, **kwargs: Any) -> Any:
        if getattr(_current, "compiling", False):  # Jinja folding constants: run it at render
            raise _refuse(f"the filter {name!r} while compiling")
        if len(args) == 1 and not kwargs and not checked:  # the value alone (trim, length)
            return _check_size(func(*args))
        values = [a for a in args if not isinstance(a, _CONTEXTS)]
        for arg in (*values[1:], *kwargs.values()):  # the value itself may be any number
            _check_int(arg)
        if name == "indent" and values and isinstance(values[0], str):
            _check_indent(values[0], values[1] if len(values) > 1 else kwargs.get("width", 4))
        if name == "replace" and len(values) >= 3:
            _check_replace(values[0], values[1], values[2])
        elif name == "join" and values:
            _check_join(values[1] if len(values) > 1 else kwargs.get("d", ""), values[0])
        elif name == "format" and values and isinstance(values[0], str):
            _check_format(values[0])
        return _check_size(func(*args, **kwargs))

    for attribute in ("jinja_pass_arg",):  # keep pass_context / pass_eval_context markers
        if hasattr(func, attribute):
            setattr(bounded, attribute, getattr(func, attribute))
    return bounded


def _check_indent(text: str, width: Any) -> None:
    size = width if isinstance(width, int) else len(str(width))
    if (text.count("\n") + 1) * size > _limits().max_value:
        raise _refuse("an indent")


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
    """Jinja's ``lipsum`` for at most 100,000 words (its own has no limit)."""
    from jinja2.utils import generate_lorem_ipsum

    if n * max > 100_000:
        raise _refuse(f"lipsum({n}, max={max})")
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _bounded_join(join: Callable[[Any], str]) -> Callable[[Any], str]:
    def bounded(pieces: Any) -> str:
        pieces = pieces if type(pieces) is list else list(pieces)
        try:
            size = sum(map(len, pieces))  # a sized piece that is no text fails the join anyway
        except TypeError:
            size = sum(len(p) for p in pieces if isinstance(p, str))
        if size > value_limit():
            raise _refuse("a joined string")
        return join(pieces)

    return bounded


class GenerationTag(Extension):
    """transformers' ``{% generation %}...{% endgeneration %}``: renders its body (the tag only
    marks assistant tokens for training masks)."""

    tags = {"generation"}  # noqa: RUF012 - Jinja's own class attribute

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox with strict attributes and bounded operators, calls and joins."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # No constant folding while compiling: Jinja's optimizer walks each expression again at
        # every level of it (a chain of 300 filters took 20 s to compile), and a filter folded
        # at compile time runs outside any deadline and is written into the code (each
        # `{{ 'x' | center(999999) }}` added 1 MB). Filters refuse to run in `compile`.
        self.optimized = False
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.concat = _bounded_join("".join)  # type: ignore[method-assign]
        self.globals["lipsum"] = bounded_lipsum

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        """Jinja's ``compile`` (of a source or a parse tree), with no filter run meanwhile:
        Jinja evaluates a constant ``{{ 'x' | f(...) }}`` as it compiles unless it fails."""
        _current.compiling = True
        try:
            return super().compile(*args, **kwargs)
        finally:
            _current.compiling = False

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Jinja's ``getattr`` (an attribute, else the item), without its failed attribute
        lookup for a message dict's key (``message.role``): a plain dict has no attributes
        but those of its type."""
        if type(obj) is dict and type(attribute) is str and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        """Refuse an unsafe attribute with an error instead of rendering it as empty."""
        raise SecurityError(f"access to attribute {attribute!r} is not allowed")

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:  # most of them
            if len(left) + len(right) > value_limit():
                raise _refuse("a concatenation")
            return left + right
        _check_binop(operator, left, right)
        return _check_size(super().call_binop(context, operator, left, right))

    def call(
        __self,
        __context: Context,
        __obj: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        _check_call(__obj, args, kwargs)
        return _check_size(super().call(__context, __obj, *args, **kwargs))


def bound_template(template: Any) -> Any:
    """``template`` with its ``~`` joins bounded too (they are module-level names in its code)."""
    namespace = template.root_render_func.__globals__
    for name in ("str_join", "markup_join"):
        if name in namespace:
            namespace[name] = _bounded_join(namespace[name])
    return template


_IDLE_LOOK = 1.0
"""Seconds between the idle watchdog's looks (a render due sooner wakes it at once)."""


class _Reset(BaseException):
    """Sent by a thread to itself to consume a timeout the watchdog fired too late."""


class _Watchdog:
    """One daemon thread that raises ``RenderTimeout`` in threads whose render is overdue.

    It never calls ``PyThreadState_SetAsyncExc(thread, NULL)``: CPython then leaves its
    "async exception" signal set for good, which slows every later Python call of the process
    (3.12: about a third) and makes any ``sys.settrace``/``sys.setprofile`` tool (pdb,
    coverage, cProfile) hang on 3.11. A timeout fired after the render ended is consumed by
    the thread itself instead (``_consume``), which clears the signal as a delivery does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._due: dict[int, float] = {}
        self._fired: set[int] = set()
        self._wakes_at = float("inf")
        """When the watchdog thread next looks at ``_due``: a render due later need not wake it."""
        self._thread: threading.Thread | None = None

    def enter(self, seconds: float) -> int:
        """Watch this thread for ``seconds``; returns the ident to give :meth:`leave`."""
        ident = threading.get_ident()
        with self._lock:  # the condition's own lock, taken without its Python-level wrapper
            due = self._due[ident] = time.monotonic() + seconds
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ctxbudget-jinja-watchdog")
                self._thread.daemon = True
                self._thread.start()
            if due < self._wakes_at:
                self._wake.notify()
        return ident

    def leave(self, ident: int) -> None:
        """Forget ``ident``'s deadline; consume a timeout fired for it and not yet raised."""
        fired = False
        while True:
            try:
                with self._lock:
                    self._due.pop(ident, None)
                    fired = fired or ident in self._fired
                    self._fired.discard(ident)
                break
            except RenderTimeout:  # raised while leaving: it is delivered, nothing is pending
                fired = False
        if fired:
            _consume(ident)

    def _run(self) -> None:
        idle_since: float | None = None
        with self._wake:
            while True:
                now = time.monotonic()
                for ident, due in list(self._due.items()):
                    if due <= now:  # again every 50 ms: a GC callback may swallow one
                        self._due[ident] = now + 0.05
                        self._fired.add(ident)
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(
                            ctypes.c_ulong(ident), ctypes.py_object(RenderTimeout)
                        )
                if self._due:
                    idle_since, self._wakes_at = None, min(self._due.values())
                else:  # look again each second for a minute, so a busy loop wakes no one
                    idle_since = now if idle_since is None else idle_since
                    self._wakes_at = now + _IDLE_LOOK if now - idle_since < 60 else float("inf")
                wait = self._wakes_at - now
                self._wake.wait(timeout=max(wait, 0.005) if wait < float("inf") else None)


def _consume(ident: int) -> None:
    """Replace a pending timeout of this thread by ``_Reset`` and let it be raised here: a
    delivered async exception is the only thing that clears CPython's signal for one."""
    try:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Reset))
        for _ in range(1_000_000):  # delivered at the first backward jump
            pass
    except (_Reset, RenderTimeout):
        pass


_WATCHDOG = _Watchdog()


def run_bounded(call: Callable[[], _T], limits: Limits) -> _T:
    """Run template code (a render, or a macro of one) within ``limits``; over a limit raises
    ``TemplateError``."""
    _current.limits, _current.max_value = limits, limits.max_value
    try:
        ident = _WATCHDOG.enter(limits.deadline)
        try:
            return call()
        finally:
            _WATCHDOG.leave(ident)
    except RenderTimeout:
        raise TemplateError(f"the template ran past its {limits.deadline:.3g} s deadline") from None
    finally:
        _current.limits, _current.max_value = None, _DEFAULT_MAX_VALUE


def render_bounded(template: Any, variables: dict[str, Any], limits: Limits) -> str:
    """Render ``template`` within ``limits``; over a limit raises ``TemplateError``."""

    def render() -> str:
        pieces: list[str] = []
        size = 0
        for piece in template.generate(**variables):
            size += len(piece)
            if size > limits.max_output:
                raise _refuse(f"a rendered prompt of over {limits.max_output:,} characters")
            pieces.append(piece)
        return "".join(pieces)

    return run_bounded(render, limits)
