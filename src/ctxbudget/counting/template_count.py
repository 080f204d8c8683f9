"""Count a request rendered by a Jinja chat template: one render, pieces, a cache by text.

Text is cut before and after every added token that no neighbour can change (tokenizers never
merge across one); each piece is tokenised alone, and a piece seen before is looked up by its
text. Where the template's message loop is message-local (``template_loop``), the loop is
rendered message by message and a step renders only what changed (an appended message is a
step with one new message); each message owns its loop text. Otherwise the prompt is rendered
whole, and each message owns the pieces from its opening marker (found from where its content
sits) to the next message's. The head owns what comes first; the tools' share of it is the
head rendered with tools minus the head without. docs/counting-internals.md walks through it.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxbudget.counting.hf import (
    FolderTemplate,
    render_template,
    run_template_code,
    strftime_now,
)
from ctxbudget.counting.result import PerMessage, RequestCount, RunningCounts, new_count
from ctxbudget.counting.sandbox import Limits, run_bounded
from ctxbudget.counting.template_build import splitter
from ctxbudget.counting.template_frame import (
    Frame,
    Observed,
    Reads,
    frame_allowed,
    suffix_start,
    unobserved,
)
from ctxbudget.counting.template_input import message_dict, template_tools
from ctxbudget.counting.template_loop import LOOP_MARKER, LoopMemo, LoopPlan, plan_loop
from ctxbudget.errors import InputError
from ctxbudget.messages.model import NOTHING_KEPT, Change, Message, Request
from ctxbudget.tokens.base import CounterKind
from ctxbudget.tokens.registry import ExactTokenizer

_PLACEHOLDER = "\ue000ctxbudget-cut\ue000"  # private-use characters: never in a template
MAX_CACHED_PIECES = 200_000


def _message_chars(message: Message, text: str) -> int:
    """Characters of ``message``'s ``text`` and tool-call arguments."""
    if not message.tool_calls:
        return len(text)
    return len(text) + sum(len(c.arguments) for c in message.tool_calls)


@dataclass(slots=True)
class PieceCache:
    """What one ``RequestCounter`` keeps between steps of a template scheme (its incremental
    state): token counts of rendered pieces by text, the template dicts of the last request's
    messages, the loop memos.
    """

    scheme: TemplateScheme
    counts: dict[str, int] = field(default_factory=dict)
    shares: dict[tuple[Any, ...], int] = field(default_factory=dict)
    loops: dict[str, LoopMemo] = field(default_factory=dict)
    dicts: list[dict[str, Any]] = field(default_factory=list)
    listed: list[dict[str, Any]] = field(default_factory=list)
    """The last ``template_messages``: the system dict (when there is one), then ``dicts``."""
    chars: list[int] = field(default_factory=list)
    """Running total of the messages' text, for the sandbox's input-proportional limits."""
    system: dict[str, Any] | None = None
    tool_specs: tuple[Any, ...] | None = None
    tools: list[dict[str, Any]] | None = None
    tools_key: str = "None"
    """``repr(tools)``, kept as ``tools`` changes: the tools' share is cached by it."""
    version: int = 0
    """How many times ``template_messages`` has run: each run is a version of ``listed``."""
    unchanged: int = 0
    """How many leading items of ``listed`` are the very objects of the version before: the
    system dict and the dicts of the messages the request kept (``Change.kept``)."""

    def template_messages(self, request: Request, common: int) -> list[dict[str, Any]]:
        """``template_input.template_messages``, reusing the dicts of the first ``common``
        messages, which the request counted last had too. The list is the same one each step,
        changed in place (a copy would touch every message): whoever keeps its items across
        steps copies them."""
        new = request.messages
        listed, head = self.listed, len(self.listed) - len(self.dicts)  # 1: a system dict
        made = [message_dict(m) for m in new[common:]]  # first: a failure here changes nothing
        del self.dicts[common:], self.chars[common:]
        total = self.chars[-1] if self.chars else 0
        for message, as_dict in zip(new[common:], made, strict=True):
            total += _message_chars(message, as_dict["content"])
            self.chars.append(total)
        self.dicts += made
        system, text = self.system, request.system
        if text is not None and (system is None or system["content"] != text):
            system = self.system = {"role": "system", "content": text}
        heads = [system] if text is not None and system is not None else []
        self.version += 1
        if head != len(heads) or (heads and listed[0] is not system):
            listed[:] = [*heads, *self.dicts]
            self.unchanged = 0
        else:  # the same system dict each step (template_frame)
            del listed[head + common :]
            listed += self.dicts[common:]
            self.unchanged = head + common
        return listed

    def same_since(self, seen: tuple[int, int] | None) -> int:
        """How many leading items of ``listed`` are the very objects they were when a loop
        last ran (``LoopMemo.seen``): the kept ones when that was the version before, else 0."""
        return self.unchanged if seen is not None and seen[0] == self.version - 1 else 0

    def kept_in_loop(self, seen: tuple[int, int] | None, start: int) -> int:
        """How many leading items of ``listed[start:]`` are the very items a loop was given
        when it last ran (``LoopMemo.seen``): 0 unless it ran on the version before, on the
        list from the same ``start``."""
        if seen is None or seen[1] != start:
            return 0
        return max(0, self.same_since(seen) - start)

    def suffix(self, start: int) -> list[dict[str, Any]]:
        """``listed[start:]``: ``listed`` or ``dicts`` themselves where it is one of them."""
        if start == 0:
            return self.listed
        if start == len(self.listed) - len(self.dicts):
            return self.dicts
        return self.listed[start:]

    def template_tools(self, request: Request, same_head: bool) -> list[dict[str, Any]] | None:
        """The tools' template dicts: the same list while the head is the same
        (``Change.same_head``)."""
        if not same_head or self.tool_specs is None:
            self.tool_specs, self.tools = request.tools, template_tools(request)
            self.tools_key = repr(self.tools)
        return self.tools

    def input_chars(self, request: Request) -> int:
        return len(request.system or "") + (self.chars[-1] if self.chars else 0)

    def count(self, request: Request, change: Change) -> RequestCount:
        """The count of ``request``, rendering and tokenising what changed."""
        result = self.scheme.count_from(request, self, change)
        if len(self.counts) > MAX_CACHED_PIECES:  # forgotten: the next step re-tokenises
            self.counts.clear()
        return result


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateScheme:
    """A chat template (or a folder's named templates), its tokenizer and template variables."""

    name: str
    template: FolderTemplate
    tokenizer: ExactTokenizer
    template_name: str | None = None
    """A named template to use (``tool_use``) instead of transformers' choice."""
    memoise_loop: bool = True
    """Render the message loop message by message where the template allows it."""

    @property
    def kind(self) -> CounterKind:
        """A template's count is exact: the model's own template and tokenizer."""
        return "exact"

    def incremental(self) -> PieceCache:
        """A fresh state for counting request after request."""
        return PieceCache(self)

    def source(self, tools: Any) -> str:
        return self.template.source(tools=tools is not None, name=self.template_name)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        add_generation_prompt: bool = True,
        source: str | None = None,
        compiled: Any = None,
        limits: Limits | None = None,
        **extra: Any,
    ) -> str:
        return render_template(
            source or self.source(tools),
            messages,
            tools,
            add_generation_prompt=add_generation_prompt,
            compiled=compiled,
            limits=limits,
            **dict(self.template.variables),
            **extra,
        )

    def _measure(
        self, cache: PieceCache, text: str, pieces: list[str] | None = None
    ) -> tuple[int, tuple[bool, bool]]:
        """Tokens of ``text``, and whether its first / last piece is an added token cut at
        (as the tokenizer splits ``text``: a token it takes inside a longer one is not);
        ``pieces``: ``text`` already split."""
        if pieces is None:
            pieces = self.tokenizer.pieces(text)
        if not pieces:
            return 0, (False, False)
        cuts = self.tokenizer.cut_tokens
        return self._total(pieces, cache), (pieces[0] in cuts, pieces[-1] in cuts)

    def _total(self, pieces: list[str], cache: PieceCache) -> int:
        """The pieces' tokens: from the cache, the new ones tokenised in one batch."""
        counts = cache.counts
        if not all(map(counts.__contains__, pieces)):
            self._cached(pieces, cache)
        return sum(map(counts.__getitem__, pieces))

    def _cached(self, pieces: list[str], cache: PieceCache) -> dict[str, int]:
        """``cache.counts`` with every piece in it: the new ones tokenised in one batch."""
        counts = cache.counts
        new = [p for p in pieces if p not in counts]
        if len(new) == 1:  # a step's new message: one text, without the batch's layers
            counts[new[0]] = self.tokenizer.count_special(new[0])
        elif new:
            new = list(dict.fromkeys(new))
            counts.update(zip(new, self.tokenizer.count_special_many(new), strict=True))
        return counts

    def count(self, request: Request) -> RequestCount:
        """The exact total with a per-part breakdown that adds up to it, with nothing kept."""
        return self.count_from(request, PieceCache(self), NOTHING_KEPT)

    def count_from(self, request: Request, cache: PieceCache, change: Change) -> RequestCount:
        """The count of ``request``; ``cache`` holds what the count of the request before
        left, and ``change`` says what differs from it."""
        messages = cache.template_messages(request, change.kept)
        tools = cache.template_tools(request, change.same_head)
        source = self.source(tools)
        chars = cache.input_chars(request)  # the sandbox's limits grow with the input
        plan = plan_loop(source) if self.memoise_loop else None
        if plan is not None:
            counted = self._count_by_loop(plan, source, request, messages, tools, cache, chars)
            if counted is not None:
                return counted
        head = messages[:1] if request.system is not None else []  # the system dict
        full = self.render(messages, tools, source=source, limits=Limits(input_chars=chars))
        pieces = self.tokenizer.pieces(full)
        counts = list(map(self._cached(pieces, cache).__getitem__, pieces))
        is_token = [self.tokenizer.is_cut_token(p) for p in pieces]
        firsts = _message_pieces(full, pieces, is_token, messages)[len(head) :]
        bounds = [firsts[0] if firsts else len(pieces), *firsts[1:], len(pieces)]
        head_tokens = sum(counts[: bounds[0]])
        parts = tuple(sum(counts[a:b]) for a, b in itertools.pairwise(bounds))
        if not request.messages:
            parts = ()
        return self._result(source, head, tools, cache, head_tokens, parts, sum(parts))

    def _count_by_loop(
        self,
        plan: LoopPlan,
        source: str,
        request: Request,
        messages: list[dict[str, Any]],
        tools: Any,
        cache: PieceCache,
        chars: int,
    ) -> RequestCount | None:
        """The count with the message loop memoised; None when the loop's parts cannot be
        counted apart (a part that meets its neighbour without an added token between) or
        the loop is not given the messages from some index on.
        ``chars``: the input's size, for the sandbox's limits (made only when Jinja runs)."""
        memo = cache.loops.get(source)
        if memo is None:
            measure = functools.partial(self._measure, cache)
            memo = cache.loops[source] = LoopMemo(plan, measure, splitter(self.tokenizer))
        run, frame, seen = memo.run, memo.frame, memo.seen
        memo.seen = None  # until the loop has run
        n = len(messages)
        start = None if frame is None else suffix_start(n, frame.view)
        if start is not None and frame.reusable(n, cache.same_since(seen), tools, strftime_now):
            # The head and tail would render as last time: run the loop alone.

            def guard(call: Callable[[], None]) -> None:
                run_template_code(lambda: run_bounded(call, Limits(input_chars=chars)))

            loop_input, known = cache.suffix(start), cache.kept_in_loop(seen, start)
            # Texts built from proven shapes and their tokenising fail as a render would.
            run_template_code(
                lambda: run(
                    loop_input,
                    frame.body,
                    frame.outer,  # a tuple: the memo keeps it, and knows it the next step
                    known,
                    guard=guard,
                )
            )
            memo.seen = (cache.version, start)
        else:
            limits = Limits(input_chars=chars)
            frame = self._render_frame(plan, source, messages, tools, cache, limits, seen)
            if frame is None:
                return None
        # The count from the loop's texts around the frame's head and tail, when the loop ran
        # on messages[offset:] (each text then belongs to one message) and they count apart.
        if memo.seen is None or not self._apart(frame, memo):
            memo.frame = None
            return None
        offset = memo.seen[1]
        h = 1 if request.system is not None else 0  # the system dict
        lead = max(0, h - offset)  # the system prompt's own loop text (0 or 1 of them)
        fixes = memo.join_fixes(lambda text: self._measure(cache, text)[0]) if memo.bad else {}
        lead_tokens = memo.counts.items[0] if lead else 0
        head_tokens = frame.before_tokens + lead_tokens
        message_tokens = memo.counts.total - lead_tokens + sum(fixes.values())
        parts = _per_message(memo.counts, lead, max(0, offset - h), frame.after_tokens, fixes)
        if parts:
            message_tokens += frame.after_tokens
        else:
            head_tokens += frame.after_tokens
        return self._result(source, messages[:h], tools, cache, head_tokens, parts, message_tokens)

    def _result(
        self,
        source: str,
        head: list[dict[str, Any]],
        tools: Any,
        cache: PieceCache,
        head_tokens: int,
        parts: Sequence[int],
        message_tokens: int,
    ) -> RequestCount:
        """The count from the head's tokens (system prompt, tools, their framing) and each
        message's; ``message_tokens`` is ``sum(parts)``, kept by the caller."""
        tools_tokens = self._tools_share(source, head, tools, head_tokens, cache)
        system = head_tokens - tools_tokens
        return new_count(self.name, "exact", system, tools_tokens, message_tokens, parts)

    def _render_frame(
        self,
        plan: LoopPlan,
        source: str,
        messages: list[dict[str, Any]],
        tools: Any,
        cache: PieceCache,
        limits: Limits,
        seen: tuple[int, int] | None,
    ) -> Frame | None:
        """Render the template with its loop memoised, watching what the head and tail read
        of ``messages``; the frame is kept in the memo when a later step may reuse it.
        ``seen``: the memo's ``seen`` before this count."""
        memo = cache.loops[source]
        memo.frame = None
        reads = Reads(len(messages))
        called: list[tuple[tuple[slice, ...] | None, Any, tuple[Any, ...]]] = []

        def loop(view: Any, body: Any, outer: list[Any]) -> str:
            items, path = unobserved(view)
            called.append((path, body, tuple(outer)))
            start = None if path is None else suffix_start(len(messages), path)
            known = 0 if start is None else cache.kept_in_loop(seen, start)
            text = str(memo.run(items, body, outer, known))
            memo.seen = None if start is None else (cache.version, start)
            return text

        text = self.render(
            Observed(messages, reads),
            tools,
            source=source,
            compiled=plan.template,
            limits=limits,
            ctxbudget_loop=loop,
            strftime_now=reads.strftime_now(strftime_now),
        )
        before, marker, after = text.partition(LOOP_MARKER)
        if not marker or LOOP_MARKER in after or len(called) != 1:
            return None
        view, body, outer = called[0]
        before_tokens, (_, before_cut) = self._measure(cache, before)
        after_tokens, (after_cut, _) = self._measure(cache, after)
        frame = Frame(
            before=before,
            after=after,
            reads=reads,
            tools=tools,
            view=view or (),
            body=body,
            outer=outer,
            before_tokens=before_tokens,
            after_tokens=after_tokens,
            before_cut=before_cut,
            after_cut=after_cut,
            length_cuts=plan.length_cuts,
        )
        reusable = plan.deterministic and not reads.whole and frame_allowed(outer)
        if reusable and memo.seen is not None:  # a later step may run the loop alone
            memo.frame = frame
        return frame

    @staticmethod
    def _apart(frame: Frame, memo: LoopMemo) -> bool:
        """True when the head meets the first loop text, and the last the tail, at an added
        token."""
        ends = memo.ends()
        if ends is None:  # no loop text: the head meets the tail
            return not (frame.before and frame.after) or frame.before_cut or frame.after_cut
        first, last = ends
        head_ok = not frame.before or frame.before_cut or memo.edges[first][0]
        tail_ok = not frame.after or memo.edges[last][1] or frame.after_cut
        return head_ok and tail_ok  # texts that meet without one are joined (join_fixes)

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
        key = (source, head[0]["content"], cache.tools_key)
        share = cache.shares.get(key)
        if share is None:
            with_tools = self._prefix(source, head, tools)
            without = self._prefix(source, head, None)
            share = 0
            if with_tools is not None and without is not None:
                share = self._measure(cache, with_tools)[0] - self._measure(cache, without)[0]
            cache.shares[key] = share
        return min(max(share, 0), head_tokens)


def _per_message(
    counts: RunningCounts, lead: int, zeros: int, after: int, extra: dict[int, int]
) -> tuple[int, ...] | PerMessage:
    """Each message's tokens from the loop texts' counts past the first ``lead`` (the
    system prompt's), after ``zeros`` messages that have no loop text (the head renders them);
    the last message also owns the tail's ``after`` tokens, and the loop text at each position
    of ``extra`` that many more (a joined run's, at its last). A view of the counts where they
    are the numbers but the last, else one copy: a step at thousands of messages pays for
    each."""
    n = len(counts)
    if n <= lead:
        return (0,) * (zeros - 1) + (after,) if zeros else ()
    if not (lead or zeros or (extra and extra.keys() - {n - 1})):
        return counts.view(extra.get(n - 1, 0) + after)
    items = counts.items
    added = {**extra, n - 1: extra.get(n - 1, 0) + after}
    for at, tokens in added.items():  # added for the copy, taken off after it (no view reads
        items[at] += tokens  # in between)
    try:
        mine = tuple(items) if not lead else tuple(itertools.islice(items, lead, None))
    finally:
        for at, tokens in added.items():
            items[at] -= tokens
    return (0,) * zeros + mine if zeros else mine


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
