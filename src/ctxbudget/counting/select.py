"""Choose how to count a request: which template and tokenizer, or which rules and estimator."""

from __future__ import annotations

from ctxbudget.counting.estimate_rules import EstimateScheme, tool_prompt_tokens
from ctxbudget.counting.hf import load_folder_template, packaged_template
from ctxbudget.counting.openai_rules import OpenAIScheme
from ctxbudget.counting.qwen import QwenScheme
from ctxbudget.counting.scheme import Scheme
from ctxbudget.counting.template_count import TemplateScheme
from ctxbudget.errors import UnknownNameError
from ctxbudget.tokens.base import TokenCounter
from ctxbudget.tokens.registry import HF_PREFIX, ExactTokenizer, get_tokenizer, tokenizer_for_model
from ctxbudget.tokens.select import GENERIC_ESTIMATOR, get_counter

TEMPLATES = ("qwen3", "qwen2.5", "qwen3.5", "openai", "estimate")
"""Template names ``template=`` accepts; ``hf:PATH`` names a model folder's own template."""

_QWEN25_NAMES = frozenset({"qwen2", "qwen2.5"})
_QWEN36_NAMES = frozenset({"qwen3.6", "qwen3.5"})


def counter_name_for_model(model: str | None) -> str:
    """The counter for a model name (Qwen2/2.5 models keep their own template's name); the
    generic estimator for a model without a public tokenizer, or no model at all."""
    if not model:
        return GENERIC_ESTIMATOR
    kind, name = tokenizer_for_model(model)
    if kind == "tokenizer" and model.strip().lower().rsplit("/", 1)[-1].startswith("qwen2"):
        return "qwen2.5"
    return name


def _default_template(requested: str, counter: TokenCounter) -> str:
    key = requested.strip().lower()
    if counter.kind != "exact":
        return "estimate"
    if counter.name.startswith(HF_PREFIX):
        return counter.name
    if key in _QWEN25_NAMES:
        return "qwen2.5"
    if counter.name in _QWEN36_NAMES:
        return "qwen3.5"
    if counter.name == "qwen3":
        return "qwen3"
    return "openai"


def choose_scheme(
    counter: str | TokenCounter, *, template: str | None = None, model: str | None = None
) -> Scheme | TemplateScheme:
    """The scheme for a counter name (kept as asked, so ``qwen2.5`` picks its own template)."""
    requested = counter if isinstance(counter, str) else counter.name
    resolved = get_counter(counter) if isinstance(counter, str) else counter
    chosen = template or _default_template(requested, resolved)
    if chosen.startswith(HF_PREFIX):
        source, extras = load_folder_template(chosen[len(HF_PREFIX) :])
        tokenizer = _exact(resolved, chosen)
        return TemplateScheme(name=resolved.name, source=source, tokenizer=tokenizer, extra=extras)
    if chosen in ("qwen3", "qwen2.5"):
        return QwenScheme(tokenizer=_exact(resolved, chosen), template=chosen)
    if chosen == "qwen3.5":
        source = packaged_template("qwen3.5.jinja")
        return TemplateScheme(name=resolved.name, source=source, tokenizer=_exact(resolved, chosen))
    if chosen == "openai":
        return OpenAIScheme(resolved)
    if chosen == "estimate":
        return EstimateScheme(resolved, tool_prompt_tokens(model))
    raise UnknownNameError("template", chosen, [*TEMPLATES, "hf:PATH"])


def _exact(counter: TokenCounter, template: str) -> ExactTokenizer:
    if isinstance(counter, ExactTokenizer):
        return counter
    # A template renders special tokens; an estimator cannot parse them, so use the template's
    # own tokenizer family.
    fallback = template if template.startswith(HF_PREFIX) else "qwen3"
    return get_tokenizer("qwen3.6" if template == "qwen3.5" else fallback)
