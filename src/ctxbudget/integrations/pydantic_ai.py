"""``context_budget_processor``: a pydantic-ai history processor that keeps the run in the window.

pydantic-ai 2 takes history processors as a capability: ``Agent(..., capabilities=
processor.capabilities())`` adds it (``ProcessHistory(processor)``) with ``processor.recovery``,
which compacts and retries once when the model still rejects a request as too long. The
processed history replaces the run's, so later steps start from the compacted view.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal, Unpack

from ctxbudget.extras import require
from ctxbudget.integrations._guard import (
    ADAPTER_META_PREFIX,
    ContextGuard,
    GuardOptions,
    overflow_of,
)
from ctxbudget.integrations._view import Translated, translate
from ctxbudget.messages.model import (
    ImagePart,
    Message,
    Request,
    TextPart,
    ToolCall,
    ToolSpec,
    join_system,
)
from ctxbudget.messages.openai import image_detail, image_from_bytes, image_from_url
from ctxbudget.messages.usage import Usage

require("pydantic_ai", "pydantic-ai", "ctxbudget.integrations.pydantic_ai")

from pydantic_ai import RunContext  # noqa: E402  (after the dependency check)
from pydantic_ai import messages as pm  # noqa: E402
from pydantic_ai.capabilities import AbstractCapability, ProcessHistory  # noqa: E402
from pydantic_ai.exceptions import ModelContextWindowExceededError, RetryModelRequest  # noqa: E402
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters  # noqa: E402

__all__ = ["ContextBudgetProcessor", "ContextBudgetRecovery", "context_budget_processor"]

PART_KEY = f"{ADAPTER_META_PREFIX}part"
"""``Message.meta`` key: the index of the part of a ``ModelRequest`` a message came from."""


def context_budget_processor(
    *,
    window: int,
    summary_model: Any = None,
    **options: Unpack[GuardOptions],
) -> ContextBudgetProcessor:
    """A history processor keeping the messages inside ``window`` tokens of ``tokenizer``.

    Summaries are written by the run's own model (``summary_model`` replaces it).
    The other keywords (``tokenizer``, ``policy``, ...) are `ContextGuard`'s.
    """
    guard = ContextGuard(window=window, **options)
    return ContextBudgetProcessor(guard, summary_model=summary_model)


class ContextBudgetProcessor:
    """Called by pydantic-ai before each model request with the run's whole history."""

    def __init__(self, guard: ContextGuard, *, summary_model: Any = None) -> None:
        self.guard = guard
        self.summary_model = summary_model
        self.tools: tuple[ToolSpec, ...] = ()
        self.recovery = ContextBudgetRecovery(self)
        """The capability for ``Agent(capabilities=[...])`` that recovers from an overflow."""

    def capabilities(self) -> list[AbstractCapability[Any]]:
        """``[recovery, ProcessHistory(self)]``, for ``Agent(capabilities=...)``."""
        return [self.recovery, ProcessHistory(self)]

    async def __call__(
        self, ctx: RunContext[Any], messages: list[pm.ModelMessage]
    ) -> list[pm.ModelMessage]:
        """The history, compacted when the rule fires for it."""
        self.recovery.retried = False
        view = translate(messages, _reader(self.guard))
        request = self.request(view)
        compacted = await asyncio.to_thread(
            self.guard.prepare, request, summarizer=self.summarizer(ctx), new_turn=True
        )
        if compacted.messages is request.messages:
            return messages
        return view.back_whole(compacted.messages, _rebuild)

    def request(self, view: Translated[pm.ModelMessage]) -> Request:
        """Our request for a translated history (its latest instructions as the system)."""
        instructions = next(
            (m.instructions for m in reversed(view.items) if isinstance(m, pm.ModelRequest)), None
        )
        system = join_system((view.system, instructions or None))  # empty instructions: none
        return Request(
            system=system,
            tools=self.tools,
            messages=view.messages,
            max_output_tokens=self.guard.max_output_tokens,
        )

    def summarizer(self, ctx: RunContext[Any]) -> _Summarizer:
        """Summaries by the run's model (or ``summary_model``), called back on this loop."""
        return _Summarizer(self.summary_model or ctx.model, asyncio.get_running_loop())


class ContextBudgetRecovery(AbstractCapability[Any]):
    """On an overflow: adopt the stated window, compact the run's history, retry once."""

    def __init__(self, processor: ContextBudgetProcessor) -> None:
        self.processor = processor
        self.retried = False
        self._pending: list[pm.ModelMessage] | None = None

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # The tools (and their schemas) count in the floor of the next request.
        params = request_context.model_request_parameters
        self.processor.tools = _tool_specs(
            [*params.function_tools, *params.output_tools, *getattr(params, "native_tools", ())]
        )
        return request_context

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self._pending is not None:
            request_context.messages = list(self._pending)
            self._pending = None
        return request_context

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> pm.ModelResponse:
        known = isinstance(error, ModelContextWindowExceededError)
        overflow = overflow_of(error, known=known)
        if overflow is None:
            raise error
        guard = self.processor.guard
        if self.retried:
            raise guard.fail(overflow) from error
        self.retried = True
        view = translate(request_context.messages, _reader(guard))
        compacted = await asyncio.to_thread(
            guard.recover,
            self.processor.request(view),
            overflow,
            summarizer=self.processor.summarizer(ctx),
        )
        history = view.back_whole(compacted.messages, _rebuild)
        ctx.messages[:] = history  # persists: later steps start from the compacted view
        self._pending = history
        raise RetryModelRequest()


# -- translation -----------------------------------------------------------------------------


def _reader(guard: ContextGuard) -> Callable[[pm.ModelMessage], list[Message]]:
    """Translation under the guard's current compaction: a response's time places its usage."""

    def read(message: pm.ModelMessage) -> list[Message]:
        return _read(message, guard.compaction_id)

    return read


def _read(message: pm.ModelMessage, compaction_id: str | None) -> list[Message]:
    if isinstance(message, pm.ModelResponse):
        return [_response(message, compaction_id)]
    out = []
    for j, part in enumerate(message.parts):
        m = _request_part(part)
        if m is not None:
            out.append(dataclasses.replace(m, meta={PART_KEY: j}))
    return out


def _request_part(part: Any) -> Message | None:
    if isinstance(part, pm.SystemPromptPart):
        return Message(role="system", content=part.content)
    if isinstance(part, pm.UserPromptPart):
        return Message(role="user", content=_user_content(part.content))
    if isinstance(part, pm.ToolReturnPart):
        return Message(
            role="tool",
            content=part.model_response_str(),
            tool_call_id=part.tool_call_id,
            name=part.tool_name,
        )
    if isinstance(part, pm.RetryPromptPart):
        if part.tool_name is None:
            return Message(role="user", content=part.model_response())
        return Message(
            role="tool",
            content=part.model_response(),
            tool_call_id=part.tool_call_id,
            name=part.tool_name,
        )
    return None


def _user_content(content: Any) -> str | tuple[TextPart | ImagePart, ...]:
    if isinstance(content, str):
        return content
    parts: list[TextPart | ImagePart] = []
    for item in content:
        if isinstance(item, str):
            parts.append(TextPart(item))
        elif isinstance(item, pm.ImageUrl):  # OpenAI's detail rides in vendor_metadata
            parts.append(image_from_url(item.url, _detail(item.vendor_metadata)))
        elif isinstance(item, pm.BinaryContent) and item.is_image:  # its size decides
            detail = _detail(item.vendor_metadata)
            parts.append(image_from_bytes(item.data, item.media_type, detail))
    return tuple(parts)


def _detail(metadata: dict[str, Any] | None) -> Literal["auto", "low", "high"] | None:
    return image_detail(metadata.get("detail")) if metadata else None


def _response(message: pm.ModelResponse, compaction_id: str | None) -> Message:
    text = "".join(p.content for p in message.parts if isinstance(p, pm.TextPart))
    thinking = "".join(p.content for p in message.parts if isinstance(p, pm.ThinkingPart))
    calls = tuple(
        ToolCall(id=p.tool_call_id, name=p.tool_name, arguments=p.args_as_json_str())
        for p in message.parts
        if isinstance(p, pm.ToolCallPart)
    )
    return Message(
        role="assistant",
        content=text,
        tool_calls=calls,
        reasoning=thinking or None,
        usage=_usage(message, compaction_id),
    )


def _usage(message: pm.ModelResponse, compaction_id: str | None) -> Usage | None:
    """``ModelResponse.usage``; its time against the last compaction decides if it still counts."""
    usage = message.usage
    if not usage.input_tokens:
        return None
    reasoning = usage.details.get("reasoning_tokens", 0) if usage.details else 0
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=min(int(reasoning), usage.output_tokens),
        compaction_id=compaction_id,
        timestamp=message.timestamp.timestamp(),
    )


def _rebuild(original: pm.ModelMessage | None, group: list[Message]) -> pm.ModelMessage:
    if original is None:  # the handoff summary
        return pm.ModelRequest(parts=[pm.UserPromptPart(content=group[0].text)])
    if isinstance(original, pm.ModelResponse):
        text = group[0].text
        kept = [p for p in original.parts if not isinstance(p, pm.TextPart | pm.ThinkingPart)]
        lead: list[pm.ModelResponsePart] = [pm.TextPart(content=text)] if text else []
        return dataclasses.replace(original, parts=[*lead, *kept])
    # The system prompt may share this request with the task (it went into our system text):
    # its parts stay, in their place.
    chosen = {int(m.meta[PART_KEY]): m for m in group}
    parts = [
        _part(original, chosen[j]) if j in chosen else part
        for j, part in enumerate(original.parts)
        if j in chosen or isinstance(part, pm.SystemPromptPart)
    ]
    return dataclasses.replace(original, parts=parts)


def _part(original: pm.ModelRequest, m: Message) -> pm.ModelRequestPart:
    """The request part ``m`` came from, with the text compaction gave it (a placeholder)."""
    part: pm.ModelRequestPart = original.parts[int(m.meta[PART_KEY])]
    if _request_part(part) == dataclasses.replace(m, meta={}):
        return part
    if type(part) is pm.ToolReturnPart:
        # A cleared or shortened output. Subclasses (tool-search returns) hold structured
        # content that a text would break: they stay as they were.
        return dataclasses.replace(part, content=m.text)  # type: ignore[arg-type]
    if isinstance(part, pm.UserPromptPart):
        return dataclasses.replace(part, content=m.text)
    if isinstance(part, pm.RetryPromptPart):
        return dataclasses.replace(part, content=m.text)
    return part


def _tool_specs(tools: Sequence[Any]) -> tuple[ToolSpec, ...]:
    specs = []
    for tool in tools:
        schema = getattr(tool, "parameters_json_schema", None)
        name = getattr(tool, "name", None)
        if isinstance(name, str):
            params = schema if isinstance(schema, dict) else {"type": "object"}
            specs.append(ToolSpec(name, getattr(tool, "description", "") or "", params))
    return tuple(specs)


# -- summaries with the run's model ----------------------------------------------------------


class _Summarizer:
    """Called from compaction's worker thread; runs the model's request on the run's loop."""

    def __init__(self, model: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.model = model
        self.loop = loop

    def summarize(self, request: Request) -> str:
        system = [] if request.system is None else [pm.SystemPromptPart(content=request.system)]
        ask = pm.ModelRequest(parts=[*system, pm.UserPromptPart(content=request.messages[0].text)])
        call = self.model.request([ask], None, ModelRequestParameters())
        reply = asyncio.run_coroutine_threadsafe(call, self.loop).result()
        return "".join(p.content for p in reply.parts if isinstance(p, pm.TextPart))
