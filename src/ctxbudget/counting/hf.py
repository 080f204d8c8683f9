"""Render a model folder's own chat template in a sandbox, as transformers 4.x and vLLM do.

The environment offers what transformers offers templates: ``tojson`` (``ensure_ascii=False``),
``raise_exception``, ``strftime_now``, ``{% generation %}``, loop controls, ``trim_blocks`` and
``lstrip_blocks``. A template that reaches for Python internals, or past the sandbox's time and
size limits, fails with a one-line ``InputError``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ctxbudget.counting.template_input import plain, tojson
from ctxbudget.errors import InputError
from ctxbudget.tokens.hf_folder import folder_root, folder_tokens, read_json

if TYPE_CHECKING:
    from pathlib import Path

    from ctxbudget.counting.sandbox import Limits

_T = TypeVar("_T")


def _raise_exception(message: str) -> NoReturn:
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


_CLOCK: dict[str, tuple[int, str]] = {}
"""The last ``strftime_now`` text of each format, with the second it was made in."""


def strftime_now(fmt: str) -> str:
    """transformers' ``strftime_now``: the local time now in ``fmt`` (a text made earlier in
    the same second is reused: only ``%f`` is finer than a second)."""
    second = int(time.time())
    made = _CLOCK.get(fmt)
    if made is not None and made[0] == second:
        return made[1]
    text = datetime.now().strftime(fmt)
    if "%f" not in fmt and (fmt in _CLOCK or len(_CLOCK) < 64):
        _CLOCK[fmt] = (second, text)
    return text


MAX_JSON_INDENT = 64  # transformers passes any indent; templates use 2 or 4


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    if not ensure_ascii and indent is None and separators is None and not sort_keys:
        return tojson(value)
    width = indent if isinstance(indent, int) else len(indent or "")
    if width > MAX_JSON_INDENT:
        from jinja2.exceptions import SecurityError

        raise SecurityError(f"tojson indent {indent!r} exceeds the template sandbox's limits")
    return json.dumps(
        plain(value),
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


@functools.lru_cache(maxsize=1)
def environment() -> Any:
    """transformers' sandboxed environment, with ctxbudget's bounds on time and memory
    (:mod:`ctxbudget.counting.sandbox`)."""
    from jinja2.ext import loopcontrols

    from ctxbudget.counting.sandbox import BoundedSandbox, GenerationTag

    env = BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


@functools.lru_cache(maxsize=32)
def compile_template(source: str) -> Any:
    """The template compiled in :func:`environment` (cached by source); one longer than
    ``MAX_TEMPLATE_CHARS``, with more parse-tree nodes than ``MAX_TEMPLATE_NODES`` or nested
    deeper than ``MAX_TEMPLATE_DEPTH`` is refused before it compiles (unbounded, a 2.5 MB
    template took 18 s and 1.4 GB)."""
    from jinja2 import TemplateError

    from ctxbudget.counting.sandbox import MAX_TEMPLATE_CHARS, bound_template

    if len(source) > MAX_TEMPLATE_CHARS:
        raise InputError(_too_long(f"chat template is {len(source):,} characters"))
    env = environment()
    try:
        tree = env.parse(source)
        _check_tree(tree)
        return bound_template(env.from_string(tree))
    except InputError:
        raise
    except RecursionError as exc:  # Jinja's parser recurses per bracket, before the depth check
        raise InputError(_too_deep("too deeply for Python's recursion limit")) from exc
    except MemoryError:  # from None: the failed compile's frames are freed at once
        size = f"{len(source):,} characters (at most {MAX_TEMPLATE_CHARS:,})"
        raise InputError(
            f"chat template ran out of memory compiling its {size}; shorten it"
        ) from None
    except TemplateError as exc:
        raise InputError(f"chat template does not compile: {_first_line(exc)}") from exc
    except Exception as exc:  # the template is untrusted text: any parser failure is its own
        what = f"{type(exc).__name__}: {_first_line(exc)}"  # SyntaxError: too many nested blocks
        raise InputError(f"chat template does not compile: {what}") from exc


def _too_long(what: str) -> str:
    from ctxbudget.counting.sandbox import MAX_TEMPLATE_CHARS

    return (
        f"{what}, over the limit of {MAX_TEMPLATE_CHARS:,}; shorten it (real chat templates"
        " are under 100 KB)"
    )


def _too_deep(how: str) -> str:
    from ctxbudget.counting.sandbox import MAX_TEMPLATE_DEPTH

    return (
        f"chat template nests blocks, brackets and expressions {how} (at most"
        f" {MAX_TEMPLATE_DEPTH} levels; real chat templates nest under 30); flatten it"
    )


def _check_tree(tree: Any) -> None:
    """Refuse a parse tree with over ``MAX_TEMPLATE_NODES`` nodes or nested deeper than
    ``MAX_TEMPLATE_DEPTH`` (walked without recursion: ``a + a + ...`` parses in a loop into a
    tree as deep as it is long)."""
    from ctxbudget.counting.sandbox import MAX_TEMPLATE_DEPTH, MAX_TEMPLATE_NODES

    stack, nodes = [(tree, 1)], 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_TEMPLATE_DEPTH:
            raise InputError(_too_deep(f"over {MAX_TEMPLATE_DEPTH} levels deep"))
        if nodes > MAX_TEMPLATE_NODES:
            raise InputError(
                f"chat template has over {MAX_TEMPLATE_NODES:,} blocks, expressions and text"
                " pieces (Jinja parse-tree nodes; real chat templates have under 1,500);"
                " simplify it"
            )
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _input_chars(value: Any) -> int:
    """Characters of text in ``value`` (the render's input), walked without recursion."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def render_template(
    source: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
    limits: Limits | None = None,
    compiled: Any = None,
    **extra: Any,
) -> str:
    """Render ``source`` as a server renders a chat request, within ``limits`` (time, size);
    any failure of the template's code is an InputError of one line."""
    from ctxbudget.counting.sandbox import Limits, render_bounded

    template = compiled if compiled is not None else compile_template(source)
    variables = {"messages": messages, "tools": tools, "documents": None, **extra}
    variables["add_generation_prompt"] = add_generation_prompt
    chosen = limits or Limits(input_chars=_input_chars([messages, tools]))
    return run_template_code(lambda: render_bounded(template, variables, chosen))


def run_template_code(call: Callable[[], _T]) -> _T:
    """``call()`` (a template's render, or a macro of one, bounded by the sandbox); any failure
    of the template's code is an InputError of one line."""
    try:
        return call()
    except InputError:  # already one line (a render inside this call)
        raise
    except Exception as exc:  # the template is untrusted code: any failure (RecursionError too)
        from jinja2 import TemplateError  # here: an import costs a step more than its render

        if isinstance(exc, TemplateError):  # SecurityError, UndefinedError, raise_exception
            what = "refused by the sandbox" if type(exc).__name__ == "SecurityError" else "failed"
            raise InputError(f"chat template {what}: {_first_line(exc)}") from exc
        raise InputError(f"chat template failed: {type(exc).__name__}: {_first_line(exc)}") from exc


@dataclass(frozen=True, slots=True)
class FolderTemplate:
    """A model folder's chat template(s) and the special-token variables every one receives."""

    templates: tuple[tuple[str, str], ...]
    """``(name, source)``; one unnamed (``""``) template, or a list such as default/tool_use."""
    variables: tuple[tuple[str, Any], ...] = ()

    def source(self, *, tools: bool, name: str | None = None) -> str:
        """The template transformers 4.57 picks (``get_chat_template``): the one asked for,
        else ``tool_use`` when tools are passed, else ``default``."""
        if len(self.templates) == 1 and not self.templates[0][0]:
            return self.templates[0][1]  # one unnamed template (asked at every count)
        named = dict(self.templates)
        if "" in named:
            return named[""]
        for choice in (name, "tool_use" if tools else None, "default"):
            if choice is not None and choice in named:
                return named[choice]
        raise InputError(
            f"the folder has chat templates {sorted(named)} and none called 'default'; pass a"
            " template name"
        )


def _named_templates(value: Any) -> tuple[tuple[str, str], ...] | None:
    if isinstance(value, str):
        return (("", value),)
    if isinstance(value, list):
        pairs = tuple(
            (str(t["name"]), t["template"])
            for t in value
            if isinstance(t, Mapping) and isinstance(t.get("template"), str) and t.get("name")
        )
        return pairs or None
    return None


@functools.lru_cache(maxsize=16)
def load_folder_template(folder: str) -> FolderTemplate:
    """A model folder's chat template(s) and special-token variables (bos_token, ...).

    ``chat_template.jinja`` wins over ``tokenizer_config.json``'s ``chat_template``, as in
    transformers 4.43+; a list of ``{name, template}`` keeps every named template.
    """
    root = folder_root(folder)
    config = read_json(root / "tokenizer_config.json")
    variables = folder_tokens(str(root)).template_variables()
    jinja_file = root / "chat_template.jinja"
    if jinja_file.is_file():
        text = _read_template_file(jinja_file)
        return FolderTemplate(templates=(("", text),), variables=variables)
    templates = _named_templates(config.get("chat_template"))
    if templates is None:
        raise InputError(
            f"{root}: no chat template; add chat_template.jinja or a chat_template string to"
            " tokenizer_config.json"
        )
    return FolderTemplate(templates=templates, variables=variables)


def _read_template_file(path: Path) -> str:
    """``path``'s text, refused unread when it is over ``MAX_TEMPLATE_CHARS`` bytes (and never
    more read than that, should it grow meanwhile)."""
    from ctxbudget.counting.sandbox import MAX_TEMPLATE_CHARS

    size, data = path.stat().st_size, b""
    if size <= MAX_TEMPLATE_CHARS:
        with path.open("rb") as file:
            data = file.read(MAX_TEMPLATE_CHARS + 1)
        size = len(data)
    if size > MAX_TEMPLATE_CHARS:
        raise InputError(_too_long(f"{path}: {size:,} bytes"))
    return data.decode("utf-8", errors="replace")


def packaged_template(name: str) -> str:
    """A chat template shipped with ctxbudget (``qwen3.5.jinja`` for Qwen3.5/3.6)."""
    path = resources.files("ctxbudget.counting").joinpath("templates", name)
    return path.read_text(encoding="utf-8")
