"""The mock model's summarizer: an extractive handoff summary, deterministic and offline.

It reads the summarizer request that compaction sends (previous summary, transcript, exact error
lines) and fills the handoff headings with sentences copied from it, never invented ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ctxbudget.messages.model import Request

__all__ = ["clip_to_tokens", "extractive_summary"]

_BLOCK = re.compile(r"^\[(user|assistant|tool result[^\]]*)\]\s*$", re.M)
_SENTENCE = re.compile(r"[^.。!?！？\n]+[.。!?！？]?")
_ERROR = re.compile(r"(?:Error\b|Error:|error:|FAILED|错误)")
_DONE_ITEMS = 6  # at most this many "done" entries: a summary must stay short


def _between(text: str, start: str, end: str) -> str | None:
    i = text.find(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    return text[i + len(start) : j if j >= 0 else len(text)].strip()


def _unique_sentences(texts: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for text in texts:
        for sentence in _SENTENCE.findall(text):
            s = sentence.strip()
            if s and not s.startswith("->"):
                seen.setdefault(s, None)
    return list(seen)


def _blocks(transcript: str) -> list[tuple[str, str]]:
    """``(role, text)`` pairs of the transcript the summarizer request carries."""
    marks = list(_BLOCK.finditer(transcript))
    out = []
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(transcript)
        role = "tool" if m.group(1).startswith("tool") else m.group(1)
        out.append((role, transcript[m.end() : end].strip()))
    return out


def _section(summary: str, name: str) -> list[str]:
    body = _between(summary, f"## {name}\n", "\n## ")
    if not body:
        return []
    return [line[2:] for line in body.splitlines() if line.startswith("- ") and line != "- none"]


def _bullets(items: Iterable[str]) -> list[str]:
    return [f"- {item}" for item in items] or ["- none"]


def extractive_summary(request: Request) -> str:
    """A handoff summary of ``request`` built only from sentences found in it."""
    text = "\n\n".join(m.text for m in request.messages)
    previous = _between(text, "<previous-summary>", "</previous-summary>") or ""
    transcript = _between(text, "<conversation>", "</conversation>")
    blocks = (
        _blocks(transcript)
        if transcript is not None
        else [(m.role, m.text) for m in request.messages]
    )
    users = [t for role, t in blocks if role == "user"]
    answers = [t for role, t in blocks if role == "assistant" and t and "-> call" not in t]
    listed = _between(text, "quote them verbatim under Errors):\n", "\n\n") or ""
    errors = _unique_sentences(
        [*_section(previous, "Errors"), *listed.splitlines()]
        + [
            line
            for role, t in blocks
            if role == "tool"
            for line in t.splitlines()
            if _ERROR.search(line)
        ]
    )
    goal = _section(previous, "Goal") or _unique_sentences(users[:1])[:1]
    done = [*_section(previous, "Done"), *(_unique_sentences(users)[:1] if previous else [])]
    done += [s for u in users[1:-1] for s in _unique_sentences([u])[:1]]
    current = _unique_sentences(users[-1:])[:1] if users else []
    lines = ["## Goal", *_bullets(goal), "", "## Progress", "### Done"]
    lines += _bullets(list(dict.fromkeys(done))[-_DONE_ITEMS:])
    lines += ["### In progress", *_bullets(current), "", "## Key decisions"]
    lines += _bullets(_unique_sentences(answers[-1:])[:2])
    lines += ["", "## Errors", *_bullets(line.strip() for line in errors[-_DONE_ITEMS:])]
    lines += ["", "## Next steps", *_bullets(f"Continue: {c}" for c in current)]
    return "\n".join(lines)


def clip_to_tokens(text: str, limit: int | None) -> str:
    """``text`` cut to at most ``limit`` qwen3 tokens, as a server stops at ``max_tokens``."""
    if limit is None:
        return text
    from ctxbudget.tokens.registry import get_tokenizer

    tokenizer = get_tokenizer("qwen3")
    ids = tokenizer.encode(text, special=False)
    if len(ids) <= limit:
        return text
    # Decode through the tiktoken-compatible ids would need the encoding; cutting characters in
    # proportion and re-checking is enough for a mock.
    cut = len(text) * limit // len(ids)
    while cut > 0 and tokenizer.count(text[:cut]) > limit:
        cut = cut * 9 // 10
    return text[:cut]
