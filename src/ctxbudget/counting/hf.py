"""Render a model folder's own chat template in a sandbox, as transformers and vLLM do.

The environment offers what transformers offers templates: ``tojson`` (``ensure_ascii=False``),
``raise_exception``, ``strftime_now``, loop controls, ``trim_blocks`` and ``lstrip_blocks``.
A template that reaches for Python internals fails with an ``InputError``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from ctxbudget.counting.template_input import tojson
from ctxbudget.errors import InputError


def _raise_exception(message: str) -> NoReturn:
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    if not ensure_ascii and indent is None and separators is None and not sort_keys:
        return tojson(value)
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=32)
def compile_template(source: str) -> Any:
    """The template compiled in transformers' sandboxed environment (cached by source)."""
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class StrictSandbox(ImmutableSandboxedEnvironment):
        """Refuses unsafe attributes with an error instead of rendering them as empty."""

        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            from jinja2.exceptions import SecurityError

            raise SecurityError(f"access to attribute {attribute!r} is not allowed")

    env = StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise InputError(f"chat template does not compile: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def render_template(
    source: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
    **extra: Any,
) -> str:
    """Render ``source`` as a server renders a chat request; template failures are InputError."""
    from jinja2 import TemplateError

    template = compile_template(source)
    try:
        text: str = template.render(
            messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **extra
        )
    except TemplateError as exc:  # SecurityError, UndefinedError and raise_exception included
        what = "refused by the sandbox" if type(exc).__name__ == "SecurityError" else "failed"
        raise InputError(f"chat template {what}: {_first_line(exc)}") from exc
    except Exception as exc:  # the template is untrusted code: any failure in it is its own
        raise InputError(f"chat template failed: {type(exc).__name__}: {_first_line(exc)}") from exc
    return text


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


@functools.lru_cache(maxsize=16)
def load_folder_template(folder: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A model folder's chat template and its special-token variables (bos_token, ...).

    ``chat_template.jinja`` wins over ``tokenizer_config.json``'s ``chat_template``, as in
    transformers 4.43+; a list of named templates gives the one called ``default``.
    """
    root = Path(folder).expanduser()
    if root.is_file():
        root = root.parent
    config_path = root / "tokenizer_config.json"
    config: dict[str, Any] = {}
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(f"{config_path}: not valid JSON ({_first_line(exc)})") from exc
    extras = tuple(
        (key, text)
        for key in ("bos_token", "eos_token", "unk_token", "pad_token")
        if (text := _token_text(config.get(key))) is not None
    )
    jinja_file = root / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8"), extras
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    if not isinstance(template, str):
        raise InputError(
            f"{root}: no chat template; add chat_template.jinja or a chat_template string to"
            " tokenizer_config.json"
        )
    return template, extras


def packaged_template(name: str) -> str:
    """A chat template shipped with ctxbudget (``qwen3.5.jinja`` for Qwen3.5/3.6)."""
    path = resources.files("ctxbudget.counting").joinpath("templates", name)
    return path.read_text(encoding="utf-8")
