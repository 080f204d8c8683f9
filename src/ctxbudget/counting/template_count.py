"""Count a request rendered by a Jinja chat template, attributing tokens by prefix renders.

Method: render the whole prompt once; render each prefix ``messages[:k]`` without the
generation prompt; the part of message k is the text between the common prefixes of the
whole prompt with renders k-1 and k. Each part is tokenised alone; tokens merged across a cut
(rare: cuts fall on role markers) go to the last part, so the parts add up to the total.
The tools' share of the head is the difference of the head rendered with and without tools.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any

from ctxbudget.counting.hf import render_template
from ctxbudget.counting.result import RequestCount
from ctxbudget.counting.template_input import template_messages, template_tools
from ctxbudget.errors import InputError
from ctxbudget.messages.model import Request
from ctxbudget.tokens.registry import ExactTokenizer

_PLACEHOLDER = "\ue000ctxbudget-cut\ue000"  # private-use characters: never in a template


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071 - a character prefix is meant


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateScheme:
    """A chat template source, the tokenizer that goes with it, and extra template variables."""

    name: str
    source: str
    tokenizer: ExactTokenizer
    extra: tuple[tuple[str, Any], ...] = ()

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        return render_template(
            self.source,
            messages,
            tools,
            add_generation_prompt=add_generation_prompt,
            **dict(self.extra),
        )

    def _try_render(self, messages: list[dict[str, Any]], tools: Any) -> str | None:
        try:
            return self.render(messages, tools, add_generation_prompt=False)
        except InputError:  # many templates refuse a prefix (no user query yet): skip the cut
            return None

    def _prefix(self, messages: list[dict[str, Any]], tools: Any) -> str | None:
        """The rendering of ``messages`` as a prefix; a template that refuses it (no user query
        yet) is asked for ``messages`` + a placeholder user turn, cut where the turn begins."""
        text = self._try_render(messages, tools)
        if text is not None:
            return text
        marker = {"role": "user", "content": _PLACEHOLDER}
        alone = self._try_render([marker], None)
        with_marker = self._try_render([*messages, marker], tools)
        if alone is None or with_marker is None or _PLACEHOLDER not in alone:
            return None
        framing = alone[: alone.index(_PLACEHOLDER)]
        at = with_marker.rfind(_PLACEHOLDER)
        if not with_marker[:at].endswith(framing):
            return None
        return with_marker[: at - len(framing)]

    def _tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, special=True)) if text else 0

    def boundaries(self, full: str, messages: list[dict[str, Any]], tools: Any) -> list[int]:
        """Cut points in ``full``: after the head, then after each message (non-decreasing)."""
        cuts: list[int] = []
        last = 0
        for k in range(len(messages) + 1):
            prefix = self._prefix(messages[:k], tools)
            if prefix is not None:
                last = max(last, _common_prefix(full, prefix))
            cuts.append(last)
        return cuts

    def count(self, request: Request) -> RequestCount:
        """The exact total with a per-part breakdown that adds up to it."""
        messages, tools = template_messages(request), template_tools(request)
        full = self.render(messages, tools)
        total = self._tokens(full)
        head_len = 1 if request.system else 0
        cuts = self.boundaries(full, messages, tools)[head_len:]
        head = self._tokens(full[: cuts[0]])
        parts = [self._tokens(full[a:b]) for a, b in itertools.pairwise(cuts)]
        tail = total - head - sum(parts)
        if parts:
            parts[-1] += tail
        else:
            head += tail
        tools_tokens = self._tools_share(messages[:head_len], tools, head)
        system = head - tools_tokens
        return RequestCount(
            counter=self.name,
            kind="exact",
            total=total,
            system=system,
            tools=tools_tokens,
            messages=sum(parts),
            per_message=tuple(parts),
            floor=system + tools_tokens,
        )

    def _tools_share(self, head: list[dict[str, Any]], tools: Any, head_tokens: int) -> int:
        if not tools:
            return 0
        if not head:
            return head_tokens  # no system prompt: the whole head frames the tools
        with_tools, without = self._prefix(head, tools), self._prefix(head, None)
        if with_tools is None or without is None:
            return 0
        share = self._tokens(with_tools) - self._tokens(without)
        return min(max(share, 0), head_tokens)
