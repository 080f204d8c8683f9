"""Choose how to count a request: which template and tokenizer, or which rules and estimator."""

from __future__ import annotations

import hashlib
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

TEMPLATES = ("qwen3", "qwen2.5", "qwen3.5", "openai", "estimate")
"""Template names ``template=`` accepts; ``hf:PATH`` names a model folder's own template, and
``hf:PATH#NAME`` one of its named templates (``tool_use``)."""

_QWEN36_NAMES = frozenset({"qwen3.6", "qwen3.5"})


def counter_name_for_model(model: str | None) -> str:
    """The counter for a model name (``hf:PATH``: that folder's tokenizer and template); the
    generic estimator for a model without a public tokenizer, or no model at all."""
    if not model:
        return GENERIC_ESTIMATOR
    return tokenizer_for_model(model)[1]


def _default_template(counter: TokenCounter) -> str:
    if counter.kind != "exact":
        return "estimate"
    if counter.name.startswith(HF_PREFIX):
        return counter.name
    if counter.name == "qwen2.5":
        return "qwen2.5"
    if counter.name in _QWEN36_NAMES:
        return "qwen3.5"
    if counter.name == "qwen3":
        return "qwen3"
    return "openai"


def choose_scheme(
    counter: str | TokenCounter, *, template: str | None = None, model: str | None = None
) -> Scheme | TemplateScheme:
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
    if chosen in ("qwen3", "qwen2.5"):
        return QwenScheme(tokenizer=_exact(resolved, chosen), template=chosen)
    if chosen == "qwen3.5":
        folder = FolderTemplate(templates=(("", packaged_template("qwen3.5.jinja")),))
        return _template_scheme()(
            name=resolved.name, template=folder, tokenizer=_exact(resolved, chosen)
        )
    if chosen == "openai":
        return OpenAIScheme(resolved)
    if chosen == "estimate":
        return EstimateScheme(resolved, tool_prompt_tokens(model))
    raise UnknownNameError("template", chosen, [*TEMPLATES, "hf:PATH"])


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
    if isinstance(counter, ExactTokenizer):
        return counter
    # A template renders special tokens; an estimator cannot parse them, so use the template's
    # own tokenizer family.
    fallback = template if template.startswith(HF_PREFIX) else "qwen3"
    return get_tokenizer("qwen3.6" if template == "qwen3.5" else fallback)
