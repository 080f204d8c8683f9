"""What an image costs in tokens, by each provider's published rule (all estimates)."""

from __future__ import annotations

import math

from ctxbudget.messages.model import ImagePart

UNKNOWN_IMAGE_TOKENS = 1_200
"""1,200: letta-code's charge for an image whose size is not known."""

# OpenAI vision pricing guide ("Calculating costs"): fit in 2048x2048, then the shortest side
# to 768, then 170 tokens per 512-px tile plus 85; detail "low" is a flat 85.
OPENAI_BASE_TOKENS = 85
OPENAI_TILE_TOKENS = 170
OPENAI_TILE_PX = 512
OPENAI_FIT_PX = 2048
OPENAI_SHORT_SIDE_PX = 768

# Anthropic vision docs: tokens = width * height / 750, after a long edge over 1568 px is
# scaled down to 1568.
CLAUDE_PIXELS_PER_TOKEN = 750
CLAUDE_MAX_EDGE_PX = 1568

# Qwen2.5-VL image processor: one token per 28x28 merged patch, at most 12,845,056 pixels
# (max_pixels) = 16,384 tokens, plus <|vision_start|> and <|vision_end|>.
QWEN_PATCH_PX = 28
QWEN_MAX_PATCHES = 16_384
QWEN_FRAME_TOKENS = 2


def _scale_to_fit(width: int, height: int, limit: int) -> tuple[float, float]:
    factor = min(1.0, limit / max(width, height))
    return width * factor, height * factor


def openai_image_tokens(image: ImagePart) -> int:
    """OpenAI's tile rule; an image of unknown size is charged ``UNKNOWN_IMAGE_TOKENS``."""
    if image.detail == "low":
        return OPENAI_BASE_TOKENS
    if not image.width or not image.height:
        return UNKNOWN_IMAGE_TOKENS
    w, h = _scale_to_fit(image.width, image.height, OPENAI_FIT_PX)
    shrink = min(1.0, OPENAI_SHORT_SIDE_PX / min(w, h))
    w, h = w * shrink, h * shrink
    tiles = math.ceil(w / OPENAI_TILE_PX) * math.ceil(h / OPENAI_TILE_PX)
    return OPENAI_BASE_TOKENS + OPENAI_TILE_TOKENS * tiles


def claude_image_tokens(image: ImagePart) -> int:
    """Anthropic's (width x height) / 750 after the 1568-px long-edge limit."""
    if not image.width or not image.height:
        return UNKNOWN_IMAGE_TOKENS
    w, h = _scale_to_fit(image.width, image.height, CLAUDE_MAX_EDGE_PX)
    return math.ceil(w * h / CLAUDE_PIXELS_PER_TOKEN)


def qwen_image_tokens(image: ImagePart) -> int:
    """Qwen2.5-VL's one token per 28x28 patch (capped), plus the two vision markers."""
    if not image.width or not image.height:
        return UNKNOWN_IMAGE_TOKENS
    patches = max(1, round(image.width / QWEN_PATCH_PX)) * max(
        1, round(image.height / QWEN_PATCH_PX)
    )
    return min(patches, QWEN_MAX_PATCHES) + QWEN_FRAME_TOKENS
