"""Choose how to count a request: which template and tokenizer, or which rules and estimator."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from ctxbudget.counting.estimate_rules import EstimateScheme, tool_prompt_tokens
from ctxbudget.counting.hf import FolderTemplate, load_folder_template, packaged_template
from ctxbudget.counting.openai_rules import OpenAIScheme
from ctxbudget.counting.qwen import NATIVE_CUT_TOKENS, NATIVE_TEMPLATES, QwenScheme
from ctxbudget.counting.scheme import Scheme
from ctxbudget.errors import UnknownNameError
from ctxbudget.tokens.base import TokenCounter
from ctxbudget.tokens.registry import (
    HF_PREFIX,
    QWEN_PATTERN,
    ExactTokenizer,
    get_tokenizer,
    tokenizer_for_model,
)
from ctxbudget.tokens.select import GENERIC_ESTIMATOR, get_counter

if TYPE_CHECKING:
    from ctxbudget.counting.template_count import TemplateScheme


def _qwen36(counter: TokenCounter, model: str | None) -> Scheme:
    # Qwen3.5 and Qwen3.6 share one template, shipped with ctxbudget and rendered by Jinja.
    folder = FolderTemplate(templates=(("", packaged_template("qwen3.5.jinja")),))
    return _template_scheme()(
        name=counter.name, template=folder, tokenizer=_exact(counter, "qwen3.6")
    )


_BUILT_IN: dict[str, Callable[[TokenCounter, str | None], Scheme]] = {
    "qwen3": lambda counter, _: QwenScheme(tokenizer=_exact(counter, "qwen3"), template="qwen3"),
    "qwen2.5": lambda counter, _: QwenScheme(
        tokenizer=_exact(counter, "qwen2.5"), template="qwen2.5"
    ),
    "qwen3.6": _qwen36,
    "openai": lambda counter, _: OpenAIScheme(counter),
    "estimate": lambda counter, model: EstimateScheme(counter, tool_prompt_tokens(model)),
}
"""The built-in templates by name; a Qwen template is named as its tokenizer is."""

_ALIASES = {"qwen3.5": "qwen3.6"}
"""Other names of a built-in template, as the tokenizer registry has them (Qwen3.5 shares
Qwen3.6's tokenizer and template)."""

TEMPLATES = (*_BUILT_IN, *_ALIASES)
"""Template names ``template=`` accepts; ``hf:PATH`` names a model folder's own template, and
``hf:PATH#NAME`` one of its named templates (``tool_use``)."""


def counter_name_for_model(model: str | None) -> str:
    """The counter for a model name (``hf:PATH``: that folder's tokenizer and template); the
    generic estimator for a model without a public tokenizer, or no model at all."""
    if not model:
        return GENERIC_ESTIMATOR
    return tokenizer_for_model(model)[1]


def _default_template(counter: TokenCounter) -> str:
    """The template that goes with a tokenizer: a folder's own, a Qwen tokenizer's namesake,
    OpenAI's rules for another exact tokenizer, the estimate rules for an estimator."""
    if counter.kind != "exact":
        return "estimate"
    if counter.name.startswith(HF_PREFIX):
        return counter.name
    return counter.name if counter.name in _BUILT_IN else "openai"


def choose_scheme(
    counter: str | TokenCounter, *, template: str | None = None, model: str | None = None
) -> Scheme:
    """The scheme for a counter name: its tokenizer with the template that goes with it."""
    resolved = get_counter(counter) if isinstance(counter, str) else counter
    chosen = template or _default_template(resolved)
    if chosen.startswith(HF_PREFIX):
        path, _, name = chosen[len(HF_PREFIX) :].partition("#")
        folder = load_folder_template(path)
        tokenizer = _exact(resolved, f"{HF_PREFIX}{path}")
        native = _native(folder, tokenizer, name)
        if native is not None:
            return QwenScheme(tokenizer=tokenizer, template=native, label=resolved.name)
        return _template_scheme()(
            name=resolved.name, template=folder, tokenizer=tokenizer, template_name=name or None
        )
    make = _BUILT_IN.get(_ALIASES.get(chosen, chosen))
    if make is None:
        raise UnknownNameError("template", chosen, [*TEMPLATES, "hf:PATH"])
    return make(resolved, model)


def _template_scheme() -> type[TemplateScheme]:
    """``TemplateScheme``, imported when a Jinja template is chosen: it loads Jinja, which
    counting with the built-in schemes (and ``import ctxbudget``) never needs."""
    from ctxbudget.counting.template_count import TemplateScheme

    return TemplateScheme


def _native(folder: FolderTemplate, tokenizer: ExactTokenizer, name: str) -> str | None:
    """``qwen2.5`` / ``qwen3`` when the folder's template is one of the native renderers' own
    and its tokenizer cuts where they cut (Qwen's pre-tokenizer), else None."""
    if name or len(folder.templates) != 1:
        return None
    native = NATIVE_TEMPLATES.get(hashlib.sha256(folder.templates[0][1].encode()).hexdigest())
    cuts = all(tokenizer.is_cut_token(t) for t in NATIVE_CUT_TOKENS)
    return native if cuts and tokenizer.pattern == QWEN_PATTERN else None


def _exact(counter: TokenCounter, template: str) -> ExactTokenizer:
    """``counter`` where it is a tokenizer; else (an estimator cannot parse the special tokens
    a template renders) the template's own: a folder's, or the Qwen template's namesake."""
    if isinstance(counter, ExactTokenizer):
        return counter
    return get_tokenizer(template)
