"""The documented tables of real provider error messages: overflow, throttling, billing, languages.

Each entry keeps a real example and where it is from; tests/data/overflow has the full corpus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BILLING_MESSAGES",
    "LOCALIZED_OVERFLOW",
    "OVERFLOW_MESSAGES",
    "RATE_WINDOW",
    "THROTTLING_MESSAGES",
    "KnownMessage",
    "N",
]

# A token count, possibly with thousands separators ("40,000"). It never starts inside a longer
# number: without the look-behind a long run of digits costs quadratic time.
N = r"(?<![\d,])\d[\d,]*"
_N = N
_PI = "Pi packages/ai/src/utils/overflow.ts (earendil-works/pi, formerly badlogic/pi-mono)"
_LITELLM = "litellm exception_mapping_utils.py (BerriAI/litellm)"
_OPENCLAW = "openclaw src/agents/pi-embedded-helpers (openclaw/openclaw)"


@dataclass(frozen=True, slots=True, kw_only=True)
class KnownMessage:
    """A provider's error message: the pattern we match, a real example and where it is from.

    Named groups ``limit`` (the real window) and ``prompt`` (the prompt's size) capture the
    numbers when the message states them.
    """

    provider: str
    pattern: re.Pattern[str]
    example: str
    source: str


def _entry(provider: str, regex: str, example: str, source: str) -> KnownMessage:
    pattern = re.compile(regex, re.IGNORECASE | re.DOTALL)
    return KnownMessage(provider=provider, pattern=pattern, example=example, source=source)


# Order matters: entries that capture numbers come before looser entries matching the same text.
OVERFLOW_MESSAGES: tuple[KnownMessage, ...] = (
    _entry(
        "vllm",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, you requested "
        rf"{_N} tokens \((?P<prompt>{_N}) in the messages",
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
        "(4000 in the messages, 1000 in the completion). Please reduce the length of the "
        "messages or completion.",
        "vLLM serving_engine.py (older releases); DeepSeek sends the same text",
    ),
    _entry(
        "vllm",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, your request has "
        rf"(?P<prompt>{_N}) input tokens",
        "This model's maximum context length is 32768 tokens. However, your request has 40000 "
        "input tokens. Please reduce the length of the input messages.",
        "vLLM vllm/entrypoints/renderer.py _create_tokens_prompt",
    ),
    _entry(
        "vllm",
        rf"maximum context length is (?P<limit>{_N}) tokens and your request has "
        rf"(?P<prompt>{_N}) input tokens",
        "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum "
        "context length is 4096 tokens and your request has 3500 input tokens "
        "(1000 > 4096 - 3500).",
        "vLLM serving_engine.py: prompt fits but prompt + max_tokens does not",
    ),
    _entry(
        "vllm",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, you requested {_N} "
        rf"output tokens and your prompt contains at least (?P<prompt>{_N}) input tokens",
        "This model's maximum context length is 262144 tokens. However, you requested 128000 "
        "output tokens and your prompt contains at least 134145 input tokens, for a total of at "
        "least 262145 tokens.",
        "vLLM 0.8+ (AIDotNet/OpenCowork#82); Pi's vLLM patterns",
    ),
    _entry(
        "vllm",
        rf"you passed (?P<prompt>{_N}) input tokens and requested {_N} output tokens\. "
        rf"However, the model'?s context length is only (?P<limit>{_N}) tokens",
        "You passed 202753 input tokens and requested 0 output tokens. However, the model's "
        "context length is only 202752 tokens, resulting in a maximum input length of 202752 "
        "tokens.",
        "vLLM / NVIDIA NIM (proxysoul/Empryo#52)",
    ),
    _entry(
        "openai",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, your messages "
        rf"resulted in (?P<prompt>{_N}) tokens",
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130000 tokens. Please reduce the length of the messages.",
        "OpenAI chat completions, error code context_length_exceeded",
    ),
    _entry(
        "openai",
        rf"maximum context length is (?P<limit>{_N}) tokens, however you requested {_N} "
        rf"tokens \((?P<prompt>{_N}) in your prompt",
        "This model's maximum context length is 2049 tokens, however you requested 2054 tokens "
        "(2049 in your prompt, 5 for the completion).",
        "OpenAI legacy completions (stanford-crfm/helm#94)",
    ),
    _entry(
        "openrouter",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, you requested about "
        rf"{_N} tokens \((?P<prompt>{_N}) of text input",
        "This endpoint's maximum context length is 8192 tokens. However, you requested about "
        "12000 tokens (10000 of text input, 2000 in the output). Please reduce the length of "
        'either one, or use the "middle-out" transform to compress your prompt automatically.',
        f"OpenRouter errors (all backends); {_PI}",
    ),
    _entry(
        "openai-compatible",
        rf"maximum context length is (?P<limit>{_N})",
        "This model's maximum context length is 131072 tokens",
        f"OpenAI, vLLM, OpenRouter, DeepSeek; {_PI}; {_LITELLM}",
    ),
    _entry(
        "vllm",
        rf"context length is only (?P<limit>{_N}) tokens",
        "However, the model's context length is only 131072 tokens",
        "vLLM; OpenCode packages/opencode/src/provider/error.ts",
    ),
    _entry(
        "openai-compatible",
        rf"exceeds (?:the )?(?:model'?s )?maximum context length of (?P<limit>{_N}) tokens",
        "Requested token count exceeds the model's maximum context length of 131072 tokens.",
        f"LiteLLM-wrapped OpenAI; {_PI}",
    ),
    _entry(
        "openai-compatible",
        rf"input length \((?P<prompt>{_N})\) exceeds (?:the )?(?:model'?s )?maximum context "
        rf"length \((?P<limit>{_N})\)",
        "Input length (265330) exceeds model's maximum context length (262144).",
        f"OpenAI-compatible servers; {_PI}",
    ),
    _entry(
        "zhipu",
        rf"(?P<prompt>{_N}) input tokens exceeds the model'?s maximum context length "
        rf"(?P<limit>{_N})",
        "Request 182387 input tokens exceeds the model's maximum context length 202750",
        "Zhipu GLM code 1210 (foreveryh/claude-code-switch#12)",
    ),
    _entry(
        "openai-compatible",
        r"exceeds (?:the )?(?:model'?s )?maximum context length",
        "This request exceeds the model's maximum context length",
        _OPENCLAW,
    ),
    _entry(
        "anthropic",
        rf"prompt is too long(?::\s*(?P<prompt>{_N}) tokens\s*>\s*(?P<limit>{_N}) maximum)?",
        "prompt is too long: 213462 tokens > 200000 maximum",
        f"Anthropic Messages API invalid_request_error; {_PI}",
    ),
    _entry(
        "anthropic",
        rf"input length and `?max_tokens`? exceed context limit(?:\s*(?::|\(i\.?e\.?)\s*"
        rf"(?P<prompt>{_N})\s*\+\s*{_N}\s*>\s*(?P<limit>{_N}))?",
        "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, "
        "decrease input length or `max_tokens` and try again",
        "Anthropic: the prompt fits but prompt + max_tokens does not (docker/docker-agent#569)",
    ),
    _entry(
        "anthropic",
        r"request_too_large",
        '{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the '
        'maximum size"}}',
        "Anthropic API errors: HTTP 413 request_too_large (bytes, not tokens)",
    ),
    _entry(
        "anthropic",
        r"request size exceeds (?:the )?model context window",
        "Request size exceeds model context window",
        "Anthropic 413 invalid_request_error (anthropics/claude-code#6380)",
    ),
    _entry(
        "bedrock",
        r"input is too long for (?:the |this |requested )?model",
        "ValidationException: Input is too long for requested model.",
        f"AWS Bedrock ValidationException; {_PI}; {_OPENCLAW}",
    ),
    _entry(
        "bedrock",
        r"too many input tokens",
        "Too many input tokens",
        f"AWS Bedrock; {_LITELLM}",
    ),
    _entry(
        "bedrock-mantle",
        rf"prompt tokens \((?P<prompt>{_N})\) exceed model maximum \((?P<limit>{_N})\)",
        "invalid_prompt: prompt tokens (330095) exceed model maximum (278528) for base model abc",
        f"Amazon Bedrock Mantle; {_PI}; {_LITELLM}",
    ),
    _entry(
        "bedrock",
        # Characters, not tokens: no window can be read from it.
        rf"expected maxLength:\s*{_N},\s*actual:\s*{_N}",
        "Malformed input request: expected maxLength: 42000, actual: 46735, please reformat "
        "your input and try again.",
        f"AWS Bedrock InvokeModel (ryanadoty/Amazon-Bedrock-Amazon-RDS-POC#9); {_LITELLM}",
    ),
    _entry(
        "bedrock",
        # The InvokeModel body cap is in bytes; a smaller conversation cures it.
        r"failed to satisfy constraint: member must have length less than or equal to",
        "1 validation error detected: Value at 'body' failed to satisfy constraint: Member must "
        "have length less than or equal to 25000000",
        "AWS Bedrock InvokeModel body cap (langchain-ai/langchain-aws#419)",
    ),
    _entry(
        "bedrock",
        r"exceed context limit",
        "AWS Bedrock Error: The request payload size has exceed context limit.",
        _LITELLM,
    ),
    _entry(
        "openai",
        r"exceed(?:s|ed)? (?:the )?(?:model'?s? )?context window",
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again.",
        f"OpenAI Responses and Completions APIs; {_PI}; {_OPENCLAW}",
    ),
    _entry(
        "openai",
        # OpenAI's per-string cap on message content, in characters. Not a tool name or the
        # 'user' field: those name their parameter, and compaction cannot shorten them.
        r"(?:invalid '(?:messages|input)\b[^']*': |(?<!': ))"
        r"string too long\. expected a string with maximum length",
        "Invalid 'messages[17].content': string too long. Expected a string with maximum length "
        "1048576, but got a string with length 1744259 instead.",
        f"OpenAI (gptscript-ai/clio#41); {_LITELLM}",
    ),
    _entry(
        "openai",
        rf"input tokens exceed the configured limit of (?P<limit>{_N}) tokens"
        rf"(?:\. your messages resulted in (?P<prompt>{_N}) tokens)?",
        "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in "
        "509178 tokens. Please reduce the length of the messages.",
        _LITELLM,
    ),
    _entry(
        "gemini",
        rf"input token count(?: \((?P<prompt>{_N})\))?.{{0,40}}?exceeds the maximum"
        rf"(?: number of tokens allowed \(?(?P<limit>{_N})\)?)?",
        "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).",
        f"Google Gemini / Vertex INVALID_ARGUMENT; {_PI}",
    ),
    _entry(
        "gemini",
        r"exceeds the maximum number of tokens",
        "INVALID_ARGUMENT: input exceeds the maximum number of tokens",
        f"Google Vertex; {_OPENCLAW}; {_LITELLM}",
    ),
    _entry(
        "xai",
        rf"maximum prompt length is (?P<limit>{_N})(?: but the request contains "
        rf"(?P<prompt>{_N}) tokens)?",
        "This model's maximum prompt length is 131072 but the request contains 537812 tokens.",
        f"xAI Grok; {_PI}",
    ),
    _entry(
        "cerebras",
        rf"current length is (?P<prompt>{_N}) while limit is (?P<limit>{_N})",
        "Please reduce the length of the messages or completion. Current length is 42328 while "
        "limit is 40000",
        f"Cerebras (cline/cline#5140); {_LITELLM}",
    ),
    _entry(
        "groq",
        r"reduce the length of the messages",
        "Please reduce the length of the messages or completion.",
        f"Groq (code context_length_exceeded); {_PI}",
    ),
    _entry(
        "copilot",
        rf"(?:prompt token count of (?P<prompt>{_N}) )?exceeds the limit of (?P<limit>{_N})",
        "prompt token count of 130000 exceeds the limit of 128000",
        f"GitHub Copilot; {_PI}",
    ),
    _entry(
        "cohere",
        rf"total tokens? exceeds? (?:the )?(?:model'?s )?(?:max|maximum) limit"
        rf"(?: of (?P<limit>{_N}))?",
        "total tokens exceeds the model's maximum limit of 4096",
        _OPENCLAW,
    ),
    _entry(
        "llamacpp",
        rf"(?:request|prompt) \((?P<prompt>{_N}) tokens\) exceeds (?:the )?available context "
        rf"size \((?P<limit>{_N}) tokens\)",
        "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
        "llama.cpp tools/server/server-context.cpp, error type exceed_context_size_error",
    ),
    _entry(
        "llamacpp",
        rf"input \((?P<prompt>{_N}) tokens\) is larger than the max context size "
        rf"\((?P<limit>{_N}) tokens\)",
        "input (9001 tokens) is larger than the max context size (8192 tokens). skipping",
        "llama.cpp tools/server/server-context.cpp (non-splittable tasks)",
    ),
    _entry(
        "llamacpp",
        r"exceeds (?:the )?available context size|exceed_context_size_error",
        "the request exceeds the available context size, try increasing it",
        f"llama.cpp server (older releases); {_PI}",
    ),
    _entry(
        "lmstudio",
        rf"trying to keep the first (?P<prompt>{_N}) tokens when context the overflows.{{0,60}}?"
        rf"context length of only (?P<limit>{_N}) tokens",
        "Trying to keep the first 10136 tokens when context the overflows. However, the model is "
        "loaded with context length of only 7866 tokens, which is not enough.",
        "LM Studio server log (cline/cline#3664)",
    ),
    _entry(
        "lmstudio",
        r"greater than the context length",
        "The number of tokens to keep from the initial prompt is greater than the context "
        "length. Try to load the model with a larger context length, or provide a shorter input",
        f"LM Studio; {_PI}",
    ),
    _entry(
        "minimax",
        r"context window exceeds limit",
        "invalid params, context window exceeds limit (2013)",
        f"MiniMax; {_PI}",
    ),
    _entry(
        "kimi",
        rf"exceeded model token limit(?::\s*(?P<limit>{_N})\s*\(requested:\s*(?P<prompt>{_N})\))?",
        "Your request exceeded model token limit: 262144 (requested: 300000)",
        f"Kimi For Coding (Moonshot); {_PI}",
    ),
    _entry(
        "mistral",
        rf"(?:prompt contains (?P<prompt>{_N}) tokens.{{0,60}}?)?too large for model with "
        rf"(?P<limit>{_N}) maximum context length",
        "Prompt contains 300000 tokens, too large for model with 131072 maximum context length",
        f"Mistral; {_PI}",
    ),
    _entry(
        "together",
        rf"input \((?P<prompt>{_N}) tokens\) is longer than the model'?s context length "
        rf"\((?P<limit>{_N}) tokens\)",
        "The input (210000 tokens) is longer than the model's context length (200000 tokens)",
        f"Together AI; {_PI}",
    ),
    _entry(
        "generic",
        rf"is longer than the model'?s context length(?: of (?P<limit>{_N}))?",
        "Your prompt is longer than the model's context length of 2048.",
        _LITELLM,
    ),
    _entry(
        "generic",
        rf"model'?s maximum context limit(?: of (?P<limit>{_N}) tokens)?",
        "The input exceeds the model's maximum context limit of 8192 tokens.",
        _LITELLM,
    ),
    _entry(
        "openrouter",
        rf"input length (?P<prompt>{_N}) exceeds the maximum allowed input length of "
        rf"(?P<limit>{_N}) tokens",
        "Input length 131393 exceeds the maximum allowed input length of 131040 tokens.",
        f"OpenRouter / Poolside; {_PI}",
    ),
    _entry(
        "ds4",
        rf"prompt has (?P<prompt>{_N}) tokens?, but the configured context size is "
        rf"(?P<limit>{_N}) tokens?",
        "Prompt has 256468 tokens, but the configured context size is 256000 tokens",
        "DS4 server; Pi CHANGELOG (earendil-works/pi#6262)",
    ),
    _entry(
        "ds4",
        rf"prompt tokens \((?P<prompt>{_N})\) exceeds context size \((?P<limit>{_N})\)",
        "Prompt tokens (9000) exceeds context size (8192)",
        "DS4 server, error type context_exceeded (antirez/ds4#150)",
    ),
    _entry(
        "vllm",
        rf"prompt \(length (?P<prompt>{_N})\) is longer than the maximum model length of "
        rf"(?P<limit>{_N})",
        "The decoder prompt (length 17772) is longer than the maximum model length of 16384.",
        "vLLM v0 _validate_model_input (xorbitsai/inference#3785)",
    ),
    _entry(
        "vllm",
        rf"prompt length of (?P<prompt>{_N}) is longer than the maximum model length of "
        rf"(?P<limit>{_N})",
        "Prompt length of 5016 is longer than the maximum model length of 4096.",
        "vLLM v1 processor (EleutherAI/lm-evaluation-harness#2880)",
    ),
    _entry(
        "vllm",
        # Both numbers in parentheses. vLLM appends "For image inputs, the number of image
        # tokens depends on ...", which vetoes the structural fallback: only this entry reads it.
        rf"prompt \(total length (?P<prompt>{_N})\) is too long to fit into the model "
        rf"\(context length (?P<limit>{_N})\)",
        "The prompt (total length 25938) is too long to fit into the model (context length "
        "4096). Make sure that `max_model_len` is no smaller than the number of text tokens "
        "plus multimodal tokens.",
        "vLLM _validate_model_input, multimodal prompts (vllm-project/vllm#7998; #12165)",
    ),
    _entry(
        "vllm",
        rf"is longer than the maximum model length of (?P<limit>{_N})",
        "input is longer than the maximum model length of 32768",
        "vLLM (any prompt kind)",
    ),
    _entry(
        "tgi",
        rf"`?inputs`? tokens \+ `?max_new_tokens`? must be <= (?P<limit>{_N})"
        rf"(?:\. Given: (?P<prompt>{_N}) `?inputs`? tokens)?",
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: "
        "8740 `inputs` tokens and 500 `max_new_tokens`",
        f"text-generation-inference router/src/validation.rs MaxTotalTokens; {_LITELLM}",
    ),
    _entry(
        "tgi",
        rf"`?inputs`? must have less than (?P<limit>{_N}) tokens(?:\. Given: (?P<prompt>{_N}))?",
        "Input validation error: `inputs` must have less than 1024 tokens. Given: 1168",
        "text-generation-inference router/src/validation.rs InputLength",
    ),
    _entry(
        "siliconflow",
        rf"number of input tokens \((?P<prompt>{_N})\) has exceeded max_prompt_tokens "
        rf"\((?P<limit>{_N})\)",
        "number of input tokens (204703) has exceeded max_prompt_tokens (202752) limit.",
        "code 20015 (leookun/cursor-byok#129)",
    ),
    _entry(
        "zai",
        r"(?:model_)?context_window_exceeded",
        "model_context_window_exceeded",
        f"z.ai / Anthropic stop reason surfaced as error text; {_PI}; {_OPENCLAW}",
    ),
    _entry(
        "zhipu",
        r"prompt exceeds max length",
        '{"code":"1261","message":"Prompt exceeds max length"}',
        "Zhipu GLM code 1261 (earendil-works/pi#8991)",
    ),
    _entry(
        "ollama",
        # "by N tokens" is the excess, not the window, so no limit can be read from it.
        r"prompt too long; exceeded (?:max )?context length",
        "prompt too long; exceeded max context length by 4096 tokens",
        "Ollama OpenAI-compatible API (num_ctx exceeded with truncation off)",
    ),
    _entry(
        "ollama",
        r"the input length exceeds the context length",
        "the input length exceeds the context length",
        "Ollama /api/embed with truncate off (jeastham1993/zettel-system)",
    ),
    _entry(
        "dashscope",
        # N is DashScope's largest input, a little under the window; adopting it is safe.
        rf"range of input length should be \[\s*1\s*,\s*(?P<limit>{_N})\s*\]",
        "<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]",
        "Alibaba Cloud Model Studio (DashScope) error codes",
    ),
    _entry(
        "generic",
        r"request entity too large",
        "413 Request Entity Too Large",
        "HTTP 413 reason phrase; OpenCode packages/opencode/src/provider/error.ts",
    ),
    _entry(
        "openai",
        r"context[_ ]length[_ ]exceeded",
        '{"error": {"message": "Input too long.", "type": "invalid_request_error", '
        '"param": "messages", "code": "context_length_exceeded"}}',
        f"OpenAI and Groq error code; generic fallback in {_PI}",
    ),
    _entry(
        "generic",
        r"too many tokens",
        "Request has too many tokens for this model",
        f"generic fallback in {_PI}",
    ),
    _entry(
        "generic",
        r"token limit exceeded",
        "token limit exceeded",
        f"generic fallback in {_PI}",
    ),
)

_SYNTH = "phrasing written for ctxbudget (no provider seen sending it yet)"

# Providers localise errors; Chinese ones are real, the others are the same sentence in kind.
LOCALIZED_OVERFLOW: tuple[KnownMessage, ...] = (
    _entry(
        "zh",
        r"上下文(?:长度|窗口)?(?:过长|太长|超出|超过|超限|已满)"
        r"|超(?:出|过)了?(?:模型)?的?(?:最大)?的?上下文"
        r"|(?:输入|提示词?|请求)(?:内容|长度)?(?:超长|过长|太长)"
        r"|(?:输入|提示词?|请求)(?:内容|长度)?超(?:出|过)了?(?:模型)?的?(?:最大)?(?:长度|上下文|限制)"
        r"|压缩上下文"
        r"|(?:token|令牌)\s*(?:数|数量)?超(?:出|过)了?(?:模型)?的?(?:最大|上限|限制)",
        "错误：上下文过长，请减少输入",
        f"Chinese proxy providers ({_OPENCLAW} tests); DeepSeek web (NIyueeE/ds-free-api#36)",
    ),
    _entry(
        "ja",
        r"コンテキスト(?:長|の長さ|ウィンドウ)?.{0,20}?(?:超え|超過)"
        r"|(?:入力|プロンプト).{0,20}?(?:長すぎ|超え|超過)"
        r"|トークン.{0,20}?(?:上限|最大).{0,10}?(?:超え|超過)",
        "入力トークン数がモデルの最大コンテキスト長を超えています",
        _SYNTH,
    ),
    _entry(
        "de",
        r"kontext(?:länge|fenster|grenze)?.{0,40}?(?:überschritten|überschreitet|zu lang|zu groß)"
        r"|(?:überschreitet|überschritten).{0,40}?(?:kontext|token)"
        r"|(?:eingabe|prompt|anfrage).{0,20}?zu lang",
        "Die Eingabe überschreitet die maximale Kontextlänge des Modells (8192 Token).",
        _SYNTH,
    ),
    _entry(
        "fr",
        r"(?:longueur|fenêtre|taille) (?:de|du) contexte.{0,40}?(?:dépass|excède)"
        r"|dépass\w*.{0,40}?(?:contexte|tokens?\b|jetons?)"
        r"|(?:requête|invite|entrée|prompt).{0,20}?trop longu?e?",
        "La requête dépasse la longueur de contexte maximale du modèle (8192 tokens).",
        _SYNTH,
    ),
    _entry(
        "es",
        r"(?:longitud|ventana|tamaño) (?:de|del) contexto.{0,40}?(?:excede|supera|sobrepasa)"
        r"|(?:excede|supera|sobrepasa).{0,40}?(?:contexto|tokens?\b)"
        r"|(?:solicitud|entrada|prompt).{0,20}?demasiado larg[ao]",
        "La solicitud excede la longitud máxima de contexto del modelo (8192 tokens).",
        _SYNTH,
    ),
    _entry(
        "pt",
        r"(?:comprimento|janela|tamanho) (?:de|do) contexto.{0,40}?(?:excede|ultrapass)"
        r"|(?:excede|ultrapass)\w*.{0,40}?(?:contexto|tokens?\b)"
        r"|(?:solicitação|entrada|prompt).{0,20}?(?:muito long[ao]|long[ao] demais)",
        "A solicitação excede o comprimento máximo de contexto do modelo (8192 tokens).",
        _SYNTH,
    ),
    _entry(
        "ko",
        r"컨텍스트.{0,20}?초과|최대.{0,20}?(?:토큰|길이).{0,20}?초과",
        "입력이 모델의 최대 컨텍스트 길이를 초과했습니다",
        _SYNTH,
    ),
)

# Per-minute (hour, day) token-rate wording; the groups hold the period's unit.
RATE_WINDOW = r"tokens per (min(?:ute)?|hour|day)|\bT[PR]([MD])\b|per[- ]minute"

# Checked before the overflow tables: a match here is never an overflow.
THROTTLING_MESSAGES: tuple[KnownMessage, ...] = (
    _entry(
        "bedrock",
        r"throttl|please wait before trying again",
        "ThrottlingException: Too many tokens, please wait before trying again.",
        "AWS Bedrock throttling; Pi's NON_OVERFLOW_PATTERNS",
    ),
    _entry(
        "openai",
        r"rate[ _-]?limit",
        "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
        "Limit 30000, Used 25000, Requested 8000. Please try again in 6s.",
        "OpenAI 429 rate_limit_exceeded",
    ),
    _entry(
        "anthropic",
        r"rate_limit_error",
        '{"type":"error","error":{"type":"rate_limit_error","message":"Number of request '
        'tokens has exceeded your per-minute rate limit"}}',
        "Anthropic 429 rate_limit_error",
    ),
    _entry(
        "groq",
        RATE_WINDOW,
        "Rate limit reached for model `llama-3.1-8b-instant` on tokens per minute (TPM): Limit "
        "6000, Used 5034, Requested 1443. Please try again in 4.77s.",
        "Groq 429 (elizaOS/eliza#4040)",
    ),
    _entry(
        "generic",
        r"too many (?:requests|concurrent)|concurrency limit",
        "Too Many Requests",
        f"HTTP 429 reason phrase; Pi's NON_OVERFLOW_PATTERNS; {_OPENCLAW}",
    ),
    _entry(
        "openai",
        r"quota",
        "You exceeded your current quota, please check your plan and billing details.",
        "OpenAI 429 insufficient_quota; Gemini 429 'Quota exceeded for metric'",
    ),
    _entry(
        "gemini",
        r"resource[ _]exhausted",
        '{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", '
        '"status": "RESOURCE_EXHAUSTED"}}',
        "Google Gemini 429",
    ),
    _entry(
        "generic",
        r"\b(?:please )?(?:retry|try again) (?:after|in) \d",
        "Rate limit exceeded, please retry after 30 seconds.",
        "retry-after wording (Pi overflow.test.ts; Gemini 'Please retry in 39.8s')",
    ),
    _entry(
        "bedrock",
        # The phrase or Bedrock's exception name, not a class such as litellm's
        # ServiceUnavailableError that wraps a plain overflow.
        r"(?<![\w.])service[ _]?unavailable(?:exception)?\s*:",
        "ServiceUnavailableException: Too many connections, please wait before trying again.",
        "AWS Bedrock 503; Pi's NON_OVERFLOW_PATTERNS ('^Service unavailable:')",
    ),
    _entry(
        "localized",
        r"频率|限流|速率限制|请求过多|请求过于频繁|配额|每分钟"
        r"|レート制限|リクエストが多すぎ|クォータ|1分あたり"
        r"|ratenlimit|zu viele anfragen|kontingent|pro minute"
        r"|limite de (?:débit|taux|requêtes)|trop de requêtes|par minute"
        r"|límite de (?:tasa|velocidad|solicitudes)|demasiadas solicitudes|cuota|por minuto"
        r"|limite de (?:taxa|requisições|solicitações)|muitas (?:requisições|solicitações)|\bcota\b"
        r"|속도 제한|요청이 너무 많|할당량|분당",
        "请求过于频繁，请稍后再试",
        _SYNTH,
    ),
)

# Paying, not compacting, cures these, even when they speak of token limits.
BILLING_MESSAGES: tuple[KnownMessage, ...] = (
    _entry(
        "generic",
        r"payment required|billing plan|credit balance|insufficient (?:credits|balance|funds)"
        r"|more credits|can only afford|spending limit|余额不足|欠费",
        "402 Payment Required: request token limit exceeded for this billing plan",
        f"{_OPENCLAW} billing tests; OpenRouter 402",
    ),
)
