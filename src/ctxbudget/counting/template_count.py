"""Count a request rendered by a Jinja chat template: one render, pieces, a cache by text.

Method: render the whole prompt once and cut it before and after every added token that no
neighbour can change (tokenizers never merge across one); each piece is tokenised alone, and a
piece seen before is looked up by its text, so a step that appends one message tokenises about
that message only. Each message owns the pieces from its opening marker (found from where its
content sits in the prompt) to the next message's; the head owns what comes first, and the
tools' share of it is the head rendered with tools minus the head rendered without.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import Any

from ctxbudget.counting.hf import FolderTemplate, render_template
from ctxbudget.counting.result import RequestCount
from ctxbudget.counting.template_input import message_dict, template_tools
from ctxbudget.errors import InputError
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.registry import ExactTokenizer

_PLACEHOLDER = "\ue000ctxbudget-cut\ue000"  # private-use characters: never in a template
MAX_CACHED_PIECES = 200_000


@dataclass(slots=True)
class PieceCache:
    """Token counts of rendered pieces by text, and template dicts of messages by identity.

    One lives in each ``RequestCounter``; it is emptied when it holds too many pieces.
    """

    counts: dict[str, int] = field(default_factory=dict)
    dicts: dict[int, tuple[Message, dict[str, Any]]] = field(default_factory=dict)
    shares: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def message(self, message: Message) -> dict[str, Any]:
        hit = self.dicts.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        value = message_dict(message)
        self.dicts[id(message)] = (message, value)
        return value

    def trim(self, live: tuple[Message, ...]) -> None:
        if len(self.counts) > MAX_CACHED_PIECES:
            self.counts.clear()
        if len(self.dicts) > 2 * len(live) + 64:
            keep = {id(m) for m in live}
            self.dicts = {k: v for k, v in self.dicts.items() if k in keep}


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateScheme:
    """A chat template (or a folder's named templates), its tokenizer and template variables."""

    name: str
    template: FolderTemplate
    tokenizer: ExactTokenizer
    template_name: str | None = None
    """A named template to use (``tool_use``) instead of transformers' choice."""

    def source(self, tools: Any) -> str:
        return self.template.source(tools=tools is not None, name=self.template_name)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        add_generation_prompt: bool = True,
        source: str | None = None,
    ) -> str:
        return render_template(
            source or self.source(tools),
            messages,
            tools,
            add_generation_prompt=add_generation_prompt,
            **dict(self.template.variables),
        )

    def _tokens(self, text: str, cache: PieceCache) -> int:
        return sum(self._counts(self.tokenizer.pieces(text), cache))

    def _counts(self, pieces: list[str], cache: PieceCache) -> list[int]:
        """Each piece's count: from the cache, the new ones tokenised in one batch."""
        counts = cache.counts
        new = list({p: None for p in pieces if p not in counts})
        if new:
            counts.update(zip(new, self.tokenizer.count_special_many(new), strict=True))
        return [counts[p] for p in pieces]

    def count(self, request: Request, cache: PieceCache | None = None) -> RequestCount:
        """The exact total with a per-part breakdown that adds up to it."""
        cache = cache if cache is not None else PieceCache()
        head = [{"role": "system", "content": request.system}] if request.system else []
        messages = [*head, *(cache.message(m) for m in request.messages)]
        tools = template_tools(request)
        source = self.source(tools)
        full = self.render(messages, tools, source=source)
        pieces = self.tokenizer.pieces(full)
        counts = self._counts(pieces, cache)
        is_token = [self.tokenizer.is_cut_token(p) for p in pieces]
        firsts = _message_pieces(full, pieces, is_token, messages)[len(head) :]
        bounds = [firsts[0] if firsts else len(pieces), *firsts[1:], len(pieces)]
        head_tokens = sum(counts[: bounds[0]])
        parts = [sum(counts[a:b]) for a, b in itertools.pairwise(bounds)]
        tools_tokens = self._tools_share(source, messages[: len(head)], tools, head_tokens, cache)
        system = head_tokens - tools_tokens
        if not request.messages:
            parts = []
        return RequestCount(
            counter=self.name,
            kind="exact",
            total=sum(counts),
            system=system,
            tools=tools_tokens,
            messages=sum(parts),
            per_message=tuple(parts),
            floor=system + tools_tokens,
        )

    def _try_render(self, source: str, messages: list[dict[str, Any]], tools: Any) -> str | None:
        try:
            return self.render(messages, tools, add_generation_prompt=False, source=source)
        except InputError:  # many templates refuse a prefix (no user query yet): skip the cut
            return None

    def _prefix(self, source: str, messages: list[dict[str, Any]], tools: Any) -> str | None:
        """The rendering of ``messages`` as a prefix; a template that refuses it (no user query
        yet) is asked for ``messages`` + a placeholder user turn, cut where the turn begins."""
        text = self._try_render(source, messages, tools)
        if text is not None:
            return text
        marker = {"role": "user", "content": _PLACEHOLDER}
        alone = self._try_render(source, [marker], None)
        with_marker = self._try_render(source, [*messages, marker], tools)
        if alone is None or with_marker is None or _PLACEHOLDER not in alone:
            return None
        framing = alone[: alone.index(_PLACEHOLDER)]
        at = with_marker.rfind(_PLACEHOLDER)
        if not with_marker[:at].endswith(framing):
            return None
        return with_marker[: at - len(framing)]

    def _tools_share(
        self,
        source: str,
        head: list[dict[str, Any]],
        tools: Any,
        head_tokens: int,
        cache: PieceCache,
    ) -> int:
        if not tools:
            return 0
        if not head:
            return head_tokens  # no system prompt: the whole head frames the tools
        key = (source, head[0]["content"], repr(tools))
        share = cache.shares.get(key)
        if share is None:
            with_tools = self._prefix(source, head, tools)
            without = self._prefix(source, head, None)
            share = 0
            if with_tools is not None and without is not None:
                share = self._tokens(with_tools, cache) - self._tokens(without, cache)
            cache.shares[key] = share
        return min(max(share, 0), head_tokens)


def _piece_starts(pieces: list[str]) -> list[int]:
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    return starts


def _anchors(message: dict[str, Any]) -> list[str]:
    """Texts that show where a message sits in the prompt: its content, else its tool calls."""
    content = message.get("content")
    found = [content, content.strip()] if isinstance(content, str) and content.strip() else []
    for call in message.get("tool_calls") or ():
        name = call.get("function", {}).get("name")
        if isinstance(name, str) and name:
            found += [f'"{name}"', name]
    return found


def _message_pieces(
    full: str, pieces: list[str], is_token: list[bool], messages: list[dict[str, Any]]
) -> list[int]:
    """The index of each message's first piece (non-decreasing; a message not found in the
    prompt starts where the next one does, so it owns nothing and the sum stays whole)."""
    starts = _piece_starts(pieces)
    found: list[int | None] = []
    search, last_piece, floor = 0, -1, 0
    for message in messages:
        at = next((a for t in _anchors(message) if (a := full.find(t, search)) >= 0), -1)
        if at < 0:
            found.append(None)
            continue
        piece = bisect.bisect_right(starts, at) - 1
        floor = max(_opener(pieces, is_token, last_piece, piece), floor)
        found.append(floor)
        search, last_piece = at + 1, piece
    firsts, later = [0] * len(found), len(pieces)
    for i in range(len(found) - 1, -1, -1):
        later = firsts[i] = later if found[i] is None else min(found[i] or 0, later)
    return firsts


# Words a turn's opening marker carries (ChatML, Llama 3, Gemma, Phi-3, Hermes, DeepSeek ...).
_ROLE_WORDS = ("system", "user", "assistant", "tool", "ipython", "model", "developer", "function")


def _names_role(pieces: list[str], k: int) -> bool:
    after = pieces[k + 1].lstrip() if k + 1 < len(pieces) else ""
    return any(w in pieces[k].lower() or after.startswith(w) for w in _ROLE_WORDS)


def _opener(pieces: list[str], is_token: list[bool], after: int, piece: int) -> int:
    """The first piece of a message whose anchor lies in ``piece``: the last added token
    between ``after`` and ``piece`` that names a role (``<|im_start|>user``), else the last
    that starts a line or follows another added token, else the piece after ``after``."""
    tokens = [k for k in range(after + 1, piece) if is_token[k]]
    for k in reversed(tokens):
        if _names_role(pieces, k):
            return k
    for k in reversed(tokens):
        if k - 1 == after or is_token[k - 1] or pieces[k - 1].endswith("\n"):
            return k
    return min(after + 1, len(pieces))
