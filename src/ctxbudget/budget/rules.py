"""When to compact: the trigger rules of five harnesses and ours, as pure functions of a window.

Each policy says where its line is (`threshold`), how it compares (`fires`), its source and when
its harness checks it (`checked`). Numbers are cited from the pinned sources in the seeds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from ctxbudget.errors import ConfigError, InvalidWindowError, UnknownNameError
from ctxbudget.messages._checks import shown

__all__ = [
    "DEFAULT_COMPACTION_RESERVE",
    "DEFAULT_REPLY_RESERVE",
    "LEARNED_GROWTH_SHARE",
    "LEARNED_REPLY_FLOOR",
    "LEARNED_REPLY_SHARE",
    "MAX_WINDOW",
    "POLICY_NAMES",
    "REPLY_RESERVE_CAP",
    "Checkpoint",
    "CodexPolicy",
    "CoreCoderPolicy",
    "CtxbudgetPolicy",
    "LettaPolicy",
    "OpenCodePolicy",
    "PiPolicy",
    "Policy",
    "SessionEvidence",
    "default_compaction_reserve",
    "default_max_output",
    "get_policy",
    "validate_window",
]

Checkpoint = Literal["before_request", "after_step", "task_end"]
POLICY_NAMES = (
    "letta",
    "pi",
    "opencode",
    "opencode-input-limit",
    "codex",
    "corecoder",
    "ctxbudget",
)

# 16,384: the most a reply normally needs; letta-code and Pi reserve exactly this for output.
REPLY_RESERVE_CAP = 16_384
# 4,096: the reply reserve when the request sets no max output; the seed's recorded model
# (Qwen3-8B, 40,960 window) replied with at most 4,096 tokens, a common server default.
DEFAULT_REPLY_RESERVE = 4_096
# 2,048: room for the summarizer's instructions next to the history it summarizes; the summary
# itself is a reply and uses the reply reserve, which is free when compaction runs.
DEFAULT_COMPACTION_RESERVE = 2_048
# In a small window both defaults shrink with it: a reply of at most a quarter of the window and
# a compaction reserve of a sixteenth (both reach their defaults at 16K and 32K). A fixed 4,096 +
# 2,048 would leave a 4,096-token window (Ollama's old default, a common adopted limit) no room.
REPLY_SHARE = 4
COMPACTION_SHARE = 16
# A reserve learned from the session's own replies stops at half the window: a session
# whose replies need more cannot be kept inside it by any reserve and still do work.
LEARNED_REPLY_SHARE = 2
# Once a session has shown its replies and no request recorded a max output, the reply reserve
# is what those replies needed, down to this floor: on the repo's four real sessions a 4,096
# floor fired before Codex's 90% line at 32K and 64K with no fewer late segments
# (bench/replay_rules.md), while 1,024 matched it without a late one.
LEARNED_REPLY_FLOOR = 1_024
# The margin learned from the context's own growth (the largest jump between two calls) stops at
# a quarter of the window. A compaction aims at half the room under the line
# (`compaction.strategies.compaction_target`), so it leaves the context near W/2; a margin of at
# most W/4 keeps the learned line at 3/4 W or above, a quarter of the window clear of what a
# compaction leaves, so one absurd jump (a 300K tool result) cannot make the rule fire on every
# step. It still covers the jump that made the rule late on a real 200K session (~28K, 14%).
LEARNED_GROWTH_SHARE = 4


def default_max_output(window: int) -> int:
    """The reply limit to ask for when none is configured: min(4,096, a quarter of W)."""
    return max(1, min(DEFAULT_REPLY_RESERVE, validate_window(window) // REPLY_SHARE))


def default_compaction_reserve(window: int) -> int:
    """The compaction reserve when none is configured: min(2,048, a sixteenth of W)."""
    return max(1, min(DEFAULT_COMPACTION_RESERVE, validate_window(window) // COMPACTION_SHARE))


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEvidence:
    """What a session has shown the rule so far, updated call by call (pure: each step returns
    a new value). The agent loop and the replay both learn through it, so they learn alike.

    A step's growth is the prompt of one call less the prompt of the call before it: the reply
    of that call plus whatever came after it (tool results, the next user message). It contains
    the reply, so the rule keeps the larger of the two free, never their sum. A compaction's drop
    is not growth: `after_compaction` forgets the last prompt, and a negative jump teaches nothing.
    """

    largest_reply: int = 0
    """The largest reply (output tokens) of any call so far."""
    largest_growth: int = 0
    """The largest growth of the prompt between two consecutive calls so far."""
    last_prompt: int | None = None
    """The prompt tokens of the last call (None: no call yet, or a compaction since)."""

    def seeing(self, prompt_tokens: int) -> SessionEvidence:
        """The evidence once a request of ``prompt_tokens`` is counted, before it is sent: the
        jump into it is already seen (its check must cover a jump of that size again)."""
        if self.last_prompt is None or prompt_tokens - self.last_prompt <= self.largest_growth:
            return self
        return dataclasses.replace(self, largest_growth=prompt_tokens - self.last_prompt)

    def after_call(self, prompt_tokens: int, reply_tokens: int) -> SessionEvidence:
        """The evidence after a call that sent ``prompt_tokens`` and got ``reply_tokens``."""
        seen = self.seeing(prompt_tokens)
        return SessionEvidence(
            largest_reply=max(seen.largest_reply, reply_tokens),
            largest_growth=seen.largest_growth,
            last_prompt=prompt_tokens,
        )

    def after_compaction(self) -> SessionEvidence:
        """The evidence after a compaction: what was learned stays (the session's tools and
        replies did not change), but the next prompt is not compared with the one before."""
        return dataclasses.replace(self, last_prompt=None)


MAX_WINDOW = 100_000_000
"""The largest window accepted: 100M tokens, ten times the largest on offer (Llama 4 Scout's
10M). A larger number is a typo or a corrupt file, and replay keeps counts as 8-byte integers."""


def validate_window(
    window: object, what: str = "window", *, fix: str = "pass the model's context length"
) -> int:
    """``window`` as an int in 1..`MAX_WINDOW`; anything else raises `InvalidWindowError`, whose
    message names ``what`` and says how to ``fix`` it."""
    if isinstance(window, bool) or not isinstance(window, int | float):
        raise InvalidWindowError(
            f"{what} must be a positive integer number of tokens, got {type(window).__name__} "
            f"{shown(window)}; {fix}"
        )
    if isinstance(window, float) and not (math.isfinite(window) and window.is_integer()):
        raise InvalidWindowError(f"{what} must be a whole number of tokens, got {window!r}; {fix}")
    if window <= 0:
        raise InvalidWindowError(f"{what} must be positive, got {shown(int(window))}; {fix}")
    if window > MAX_WINDOW:
        raise InvalidWindowError(
            f"{what} must be at most {MAX_WINDOW:,} tokens, got {shown(window)}; {fix}"
        )
    return int(window)


def _tokens(value: object, what: str, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{what} must be a non-negative integer, got {value!r}")


def _ratio(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{what} must be a number in (0, 1], got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """A trigger rule: where the line is for a window and when it is checked."""

    name: str
    checked: tuple[Checkpoint, ...]
    source: str

    def threshold(self, window: int) -> int:
        """The line as the harness defines it; at or below 0 it compacts before every request."""
        raise NotImplementedError

    def fires(self, tokens: int, window: int) -> bool:
        """True when ``tokens`` in a ``window`` cross the line (strictly, unless noted)."""
        return tokens > self.threshold(validate_window(window))

    def tiers(self, window: int) -> tuple[int, ...] | None:
        """All lines of a tiered rule, lowest first; None for a single line."""
        return None

    def fires_in_session(
        self,
        tokens: int,
        window: int,
        *,
        largest_reply: int = 0,
        largest_growth: int = 0,
        max_output: int | None = None,
    ) -> bool:
        """`fires`, for a rule that learns from the session so far: ``largest_reply`` and
        ``largest_growth`` are the largest reply and step it has seen (`SessionEvidence`),
        ``max_output`` the request's max output when known. Only ``ctxbudget`` learns; the
        harnesses' rules keep their fixed lines."""
        return self.fires(tokens, window)

    def threshold_in_session(
        self,
        window: int,
        *,
        largest_reply: int = 0,
        largest_growth: int = 0,
        max_output: int | None = None,
    ) -> int:
        """`threshold`, once the session has shown replies of up to ``largest_reply`` and steps
        of up to ``largest_growth``."""
        return self.threshold(window)

    def compacts_every_request(self, window: int) -> bool:
        """True when even an empty context is over the line, as Pi and OpenCode at 2,400."""
        return self.fires(0, window)

    def parameters(self) -> dict[str, object]:
        """The tunable parameters and their values (what `get_policy` accepts as overrides)."""
        fixed = {"name", "checked", "source"}
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in fixed
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class LettaPolicy(Policy):
    """letta-code: tokens > W - min(16,384, max(1, floor(0.2 W))); never below 0.

    Checked in the provider preflight before each request and again once the reply's usage is
    known (pi-stream-adapter.ts:562, :767).
    """

    name: str = "letta"
    checked: tuple[Checkpoint, ...] = ("before_request", "after_step")
    source: str = "letta-code@70ead335 src/backend/dev/provider-turn-executor.ts:34-35,241-259"
    reserve_tokens: int = 16_384
    small_window_ratio: float = 0.2

    def __post_init__(self) -> None:
        _tokens(self.reserve_tokens, "reserve_tokens")
        _ratio(self.small_window_ratio, "small_window_ratio")

    def threshold(self, window: int) -> int:
        w = validate_window(window)
        reserve = min(self.reserve_tokens, max(1, math.floor(w * self.small_window_ratio)))
        return max(0, w - reserve)


@dataclass(frozen=True, slots=True, kw_only=True)
class PiPolicy(Policy):
    """Pi: tokens > W - reserveTokens (16,384), with no floor at 0.

    Checked after a task ends, before the next user prompt (agent-session.ts:1950-1962); in the
    middle of a task only a context-overflow error compacts, then retries once.
    """

    name: str = "pi"
    checked: tuple[Checkpoint, ...] = ("task_end",)
    source: str = "pi-mono@31b513e3 packages/coding-agent/src/core/compaction/compaction.ts:235-238"
    reserve_tokens: int = 16_384

    def __post_init__(self) -> None:
        _tokens(self.reserve_tokens, "reserve_tokens")

    def threshold(self, window: int) -> int:
        return validate_window(window) - self.reserve_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenCodePolicy(Policy):
    """OpenCode: tokens >= usable (note: >=).

    usable = input_limit - min(20,000, max_output) when the model declares an input limit, else
    W - max_output; both floored at 0. max_output defaults to 32,000. Checked after each step.
    """

    name: str = "opencode"
    checked: tuple[Checkpoint, ...] = ("after_step",)
    source: str = "opencode@v1.18.32 packages/opencode/src/session/overflow.ts:1-34"
    max_output: int = 32_000
    compaction_buffer: int = 20_000
    reserved: int | None = None
    """``compaction.reserved`` from the config; replaces min(buffer, max_output) when set."""
    input_limit: int | None = None
    input_limit_is_window: bool = False
    """The ``opencode-input-limit`` preset: the model declares an input limit equal to W."""

    def __post_init__(self) -> None:
        _tokens(self.max_output, "max_output")
        _tokens(self.compaction_buffer, "compaction_buffer")
        _tokens(self.reserved, "reserved", allow_none=True)
        if self.input_limit is not None:
            validate_window(self.input_limit, "input_limit")
        if not isinstance(self.input_limit_is_window, bool):
            raise ConfigError(
                f"input_limit_is_window must be a bool, got {self.input_limit_is_window!r}"
            )

    def threshold(self, window: int) -> int:
        w = validate_window(window)
        limit = w if self.input_limit_is_window else self.input_limit
        if limit is None:
            return max(0, w - self.max_output)
        reserved = self.reserved
        if reserved is None:
            reserved = min(self.compaction_buffer, self.max_output)
        return max(0, limit - reserved)

    def fires(self, tokens: int, window: int) -> bool:
        return tokens >= self.threshold(window)


@dataclass(frozen=True, slots=True, kw_only=True)
class CodexPolicy(Policy):
    """Codex: tokens >= min(configured limit, floor(0.9 W)).

    Checked before each turn and after each sampling step while the model still has work
    (turn.rs:430-464), so long tasks compact midway.
    """

    name: str = "codex"
    checked: tuple[Checkpoint, ...] = ("before_request", "after_step")
    source: str = "codex@8cabf5a codex-rs/protocol/src/openai_models.rs:463-479"
    configured_limit: int | None = None

    def __post_init__(self) -> None:
        _tokens(self.configured_limit, "configured_limit", allow_none=True)

    def threshold(self, window: int) -> int:
        line = validate_window(window) * 9 // 10  # integer (W * 9) / 10 as in the Rust
        return line if self.configured_limit is None else min(self.configured_limit, line)

    def fires(self, tokens: int, window: int) -> bool:
        return tokens >= self.threshold(window)


CoreCoderStage = Literal["snip", "summarize", "collapse"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreCoderPolicy(Policy):
    """CoreCoder v0.4.0: three tiers int(0.5 W), int(0.7 W), int(0.9 W); tokens > tier.

    50%: snip tool outputs; 70%: summarize (only with > 10 messages); 90%: hard collapse (only
    with > 4 messages). Checked after each user message and each tool round.
    """

    name: str = "corecoder"
    checked: tuple[Checkpoint, ...] = ("before_request", "after_step")
    source: str = "CoreCoder@v0.4.0 corecoder/context.py:37-43"
    snip_ratio: float = 0.50
    summarize_ratio: float = 0.70
    collapse_ratio: float = 0.90
    summarize_min_messages: int = 10
    collapse_min_messages: int = 4

    def __post_init__(self) -> None:
        for what in ("snip_ratio", "summarize_ratio", "collapse_ratio"):
            _ratio(getattr(self, what), what)
        _tokens(self.summarize_min_messages, "summarize_min_messages")
        _tokens(self.collapse_min_messages, "collapse_min_messages")

    def tiers(self, window: int) -> tuple[int, ...]:
        w = validate_window(window)
        # int(w * ratio) in floating point, exactly as the Python original computes it.
        return (
            int(w * self.snip_ratio),
            int(w * self.summarize_ratio),
            int(w * self.collapse_ratio),
        )

    def threshold(self, window: int) -> int:
        return self.tiers(window)[0]

    def stage(self, tokens: int, window: int, message_count: int) -> CoreCoderStage | None:
        """The deepest tier that applies to ``tokens`` and ``message_count``, if any."""
        snip, summarize, collapse = self.tiers(window)
        if tokens > collapse and message_count > self.collapse_min_messages:
            return "collapse"
        if tokens > summarize and message_count > self.summarize_min_messages:
            return "summarize"
        return "snip" if tokens > snip else None


@dataclass(frozen=True, slots=True, kw_only=True)
class CtxbudgetPolicy(Policy):
    """Ours: tokens + reply reserve + compaction reserve > W, checked before every request and
    after every step.

    Why these choices:

    - Usage-first: ``tokens`` comes from `context_tokens`, the provider's own count of the last
      prompt plus only the messages added since, so a local estimator's error (chars/4 reads
      Chinese at 0.38x) touches a few messages, not the whole history.
    - A reserve, not a percentage: what must stay free is one reply plus one compaction, which
      does not grow with the window. A percentage wastes 10-50% of a 1M window and still
      overflows a small one; ``W - reserve`` approaches 100% of large windows and keeps its
      margin on small ones.
    - The reply reserve grows with the reply: it is the request's max output, capped at 16,384
      (letta-code's and Pi's output reserve) so that a model that allows 128K replies does not
      give up a large share of a small window; when the request sets none, min(4,096, W/4).
      The whole reserve is learned from the session too (`reserve_in_session`): never less
      than the largest reply seen so far (up to W/2), since a model that once replied with 29K
      tokens may again. With a max output known the fixed reserves are its floor; with none
      known (a replayed trace) the replies seen are the evidence, over a 1,024-token floor.
    - The context's own growth is learned as well: never less free than the largest jump
      between two calls seen so far (up to W/4), so that a step as large as one already seen
      (a 28K tool result) cannot carry the context past the window between two checks. A
      step contains its reply, so the two are not added: the larger one is kept.
      The compaction reserve, min(2,048, W/16) unless set, holds the summarizer's instructions;
      its summary uses the reply reserve. Both shrink in small windows, so a 4,096-token server
      still leaves room for a conversation.
    - Checked before the request: a near-full request is not rejected, it is cut short -- pi-ai
      lowers max_tokens to W - estimate - 4,096 (at least 1), so the reply stops with ``length``
      where no overflow retry can catch it (letta-code provider-turn-executor.ts:225-240).
      Checking after each step as well keeps long tool loops inside the window.

    When the reserves alone reach W (threshold <= 0) no conversation fits: the prompt floor
    check (`check_prompt_floor`) refuses to send rather than compacting forever.
    """

    name: str = "ctxbudget"
    checked: tuple[Checkpoint, ...] = ("before_request", "after_step")
    source: str = "ctxbudget (this library); reserves from letta-code and Pi"
    max_output: int | None = None
    """The request's max output tokens; None: `default_max_output` of the window."""
    reply_cap: int = REPLY_RESERVE_CAP
    compaction_reserve: int | None = None
    """Tokens kept for a compaction; None: `default_compaction_reserve` of the window."""

    def __post_init__(self) -> None:
        _tokens(self.max_output, "max_output", allow_none=True)
        _tokens(self.reply_cap, "reply_cap")
        _tokens(self.compaction_reserve, "compaction_reserve", allow_none=True)

    def reply_reserve(self, window: int, *, max_output: int | None = None) -> int:
        """Tokens kept for the reply in ``window``: the max output asked for (``max_output``,
        the request's when known, else the rule's, else the default), capped at ``reply_cap``."""
        wanted = self.max_output if max_output is None else max_output
        if wanted is None:
            wanted = default_max_output(window)
        return min(wanted, self.reply_cap)

    def compaction_reserve_for(self, window: int) -> int:
        """Tokens kept for a compaction in ``window``."""
        if self.compaction_reserve is not None:
            return self.compaction_reserve
        return default_compaction_reserve(window)

    def reserve(self, window: int) -> int:
        """Everything kept free in ``window``: reply reserve + compaction reserve."""
        return self.reserve_in_session(window)

    def reserve_in_session(
        self,
        window: int,
        *,
        largest_reply: int = 0,
        largest_growth: int = 0,
        max_output: int | None = None,
    ) -> int:
        """What must stay free before the next call, once the session has shown replies of up
        to ``largest_reply`` tokens and steps of up to ``largest_growth``.

        The next call is a request, whose reply may be as large as the largest so far, or a
        compaction, whose instructions and summary the fixed reserves hold; the step after the
        request (reply plus tool results) may grow the context as much as the largest step so
        far before the rule is checked again. So: the largest of reply + compaction reserve,
        the largest reply (up to W/2) and the largest step (up to W/4). A step holds its reply,
        so the two are alternatives, not a sum. When neither the request nor the rule sets a
        max output and the session has replied, the reply reserve is `LEARNED_REPLY_FLOOR`
        (the largest reply then speaks for itself).
        """
        if largest_reply > 0 and max_output is None and self.max_output is None:
            # No max output known: the replies seen so far are the evidence, with a floor.
            reply = min(LEARNED_REPLY_FLOOR, default_max_output(window), self.reply_cap)
        else:
            reply = self.reply_reserve(window, max_output=max_output)
        fixed = reply + self.compaction_reserve_for(window)
        w = validate_window(window)
        return max(
            fixed,
            min(largest_reply, w // LEARNED_REPLY_SHARE),
            min(largest_growth, w // LEARNED_GROWTH_SHARE),
        )

    def threshold(self, window: int) -> int:
        return self.threshold_in_session(window)

    def threshold_in_session(
        self,
        window: int,
        *,
        largest_reply: int = 0,
        largest_growth: int = 0,
        max_output: int | None = None,
    ) -> int:
        """The line once the session has shown ``largest_reply`` and ``largest_growth`` (see
        `reserve_in_session`)."""
        reserve = self.reserve_in_session(
            window,
            largest_reply=largest_reply,
            largest_growth=largest_growth,
            max_output=max_output,
        )
        return validate_window(window) - reserve

    def fires_in_session(
        self,
        tokens: int,
        window: int,
        *,
        largest_reply: int = 0,
        largest_growth: int = 0,
        max_output: int | None = None,
    ) -> bool:
        line = self.threshold_in_session(
            window,
            largest_reply=largest_reply,
            largest_growth=largest_growth,
            max_output=max_output,
        )
        return tokens > line


_PRESETS: dict[str, Policy] = {
    "letta": LettaPolicy(),
    "pi": PiPolicy(),
    "opencode": OpenCodePolicy(),
    "opencode-input-limit": OpenCodePolicy(name="opencode-input-limit", input_limit_is_window=True),
    "codex": CodexPolicy(),
    "corecoder": CoreCoderPolicy(),
    "ctxbudget": CtxbudgetPolicy(),
}


def get_policy(name: str, /, **overrides: object) -> Policy:
    """The preset ``name``, with parameters overridden: ``get_policy("pi", reserve_tokens=10_000)``.

    An unknown name raises `UnknownNameError` listing the names; an unknown parameter or a bad
    value raises `ConfigError`.
    """
    try:
        preset = _PRESETS[name]
    except (KeyError, TypeError):
        raise UnknownNameError("policy", str(name), list(POLICY_NAMES)) from None
    known = preset.parameters()
    for key in overrides:
        if key not in known:
            raise ConfigError(
                f"policy {name!r} has no parameter {key!r}; its parameters: {', '.join(known)}"
            )
    return dataclasses.replace(preset, **overrides)  # type: ignore[arg-type]
