"""Known context windows by model name, for traces that do not record their window."""

from __future__ import annotations

# Longest matching prefix wins. Each number cites where it comes from; "assumption" marks a
# number read off a session rather than from the vendor.
KNOWN_WINDOWS: dict[str, int] = {
    # Anthropic models overview: 200K context for Claude 3.x and 4.x models (1M only as a beta).
    "claude-": 200_000,
    # Codex CLI rollouts record model_context_window 272000 for gpt-5-codex (shared trace);
    # Codex's openai_models.rs uses the same 272,000 for the gpt-5 family.
    "gpt-5": 272_000,
    # OpenAI model pages: gpt-4o and gpt-4o-mini 128K; gpt-4.1 family 1,047,576.
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    # DeepSeek API "Models & Pricing": deepseek-chat / deepseek-reasoner 128K since V3.1
    # (the original V3 API served 64K).
    "deepseek-chat": 128_000,
    "deepseek-reasoner": 128_000,
    # Z.ai model docs: GLM-4.5 128K, GLM-4.6 200K.
    "glm-4.5": 128_000,
    "glm-4.6": 200_000,
    # Assumption: the shared Pi session's sub-agent status for zai/glm-5.2 reports
    # contextWindow 1000000, and its main context reaches 374,551 tokens.
    "glm-5": 1_000_000,
    # The seed's recorded model: Qwen3-8B, 40,960 (its config's max_position_embeddings).
    "qwen3-8b": 40_960,
}


def known_window(model: str | None) -> int | None:
    """The window of ``model`` from `KNOWN_WINDOWS` (longest prefix, case-insensitive)."""
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    matches = [p for p in KNOWN_WINDOWS if name.startswith(p)]
    return KNOWN_WINDOWS[max(matches, key=len)] if matches else None


# A window the peak fills to 85-90%: rules that keep a reserve of 10-15% (codex at 90%, opencode's
# 32,000 of ~250K) fire near the end, the wall stays out of reach, and the curve uses the plot.
_FILL_LOW, _FILL_HIGH = 85, 90


def _round_steps() -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to 5e12, largest first."""
    steps: list[int] = []
    scale = 1
    for _ in range(13):
        steps += (scale, 2 * scale, 5 * scale)
        scale *= 10
    return tuple(reversed(steps))


_ROUND_STEPS = _round_steps()


def suggest_window(peak: int) -> int:
    """A round window that ``peak`` tokens fill to 85-90% (the roundest such number)."""
    low = max(1, -(-peak * 100 // _FILL_HIGH))  # ceil(peak / 0.90)
    high = peak * 100 // _FILL_LOW  # floor(peak / 0.85)
    for step in _ROUND_STEPS:
        candidate = -(-low // step) * step
        if candidate <= high:
            return candidate
    return low  # a peak under 7 tokens: no integer lies in the band
