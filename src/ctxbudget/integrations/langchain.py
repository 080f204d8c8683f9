"""``ContextBudgetMiddleware``: ctxbudget's budget inside ``langchain.agents.create_agent``.

``before_model`` compacts the agent state when the rule fires; ``wrap_model_call`` checks the
full request (system prompt and tools included), recovers from an overflow by compacting and
retrying once, and stamps each reply's ``usage_metadata`` as the next count's base.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Unpack

from ctxbudget.extras import require
from ctxbudget.integrations._guard import ContextGuard, GuardOptions, overflow_of
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
from ctxbudget.messages.openai import image_detail, image_from_url, request_from_openai
from ctxbudget.messages.usage import Usage

require("langchain.agents.middleware", "langchain", "ctxbudget.integrations.langchain")

from langchain.agents.middleware import (  # noqa: E402  (after the dependency check)
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.exceptions import ContextOverflowError as LangChainOverflow  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: E402
from langgraph.types import Command  # noqa: E402

__all__ = ["STAMP_KEY", "ContextBudgetMiddleware"]

STAMP_KEY = "ctxbudget"
"""``AIMessage.response_metadata`` key: the compaction and time a reply's usage belongs to."""

Handler = Callable[[ModelRequest], Any]
AsyncHandler = Callable[[ModelRequest], Awaitable[Any]]


class ContextBudgetMiddleware(AgentMiddleware):
    """Keeps a ``create_agent`` conversation inside ``window`` tokens, counted by ``tokenizer``.

    ``policy`` (a rule name or `Policy`), ``strategy`` and ``archive`` are the core's. Summaries
    are written by the agent's own model (``summary_model`` replaces it). The state's messages
    are replaced by the compacted view, so every later step starts from it.
    """

    def __init__(
        self,
        *,
        window: int,
        summary_model: Any = None,
        **options: Unpack[GuardOptions],
    ) -> None:
        super().__init__()
        self.guard = ContextGuard(window=window, **options)
        self.summary_model = summary_model
        self._model: Any = summary_model
        self._system: str | None = None
        self._tools: tuple[ToolSpec, ...] = ()

    # -- before_model: compact the state -----------------------------------------------------

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """State update replacing the messages by the compacted view, when the rule fires."""
        if self._model is None:
            return None  # before the first model call: `wrap_model_call` knows the whole request
        view = translate(state["messages"], _read)
        request = self._request(view)
        compacted = self.guard.prepare(request, summarizer=_Summarizer(self._model), new_turn=True)
        return _state_update(view, request, compacted)

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """`before_model` for async runs; the summary call runs on the caller's event loop."""
        if self._model is None:
            return None
        view = translate(state["messages"], _read)
        request = self._request(view)
        summarizer = _LoopSummarizer(self._model, asyncio.get_running_loop())
        compacted = await asyncio.to_thread(
            self.guard.prepare, request, summarizer=summarizer, new_turn=True
        )
        return _state_update(view, request, compacted)

    # -- wrap_model_call: the full request, overflow recovery, usage ---------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Handler) -> Any:
        """Send ``request`` inside the window; on overflow compact, retry once, persist."""
        view, ours = self._learn(request)
        sending = _Sending(view, ours, request)

        def send(sent: Request) -> Any:
            try:
                return handler(sending.model_request(sent))
            except Exception as error:
                raise _overflow(error) or error from error

        response = self.guard.run(ours, send, summarizer=_Summarizer(self._model))
        return self._finish(response, sending.compacted)

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncHandler) -> Any:
        """`wrap_model_call` for async runs."""
        view, ours = self._learn(request)
        sending = _Sending(view, ours, request)

        async def send(sent: Request) -> Any:
            try:
                return await handler(sending.model_request(sent))
            except Exception as error:
                raise _overflow(error) or error from error

        summarizer = _LoopSummarizer(self._model, asyncio.get_running_loop())
        response = await self.guard.arun(ours, send, summarizer=summarizer)
        return self._finish(response, sending.compacted)

    # -- helpers ---------------------------------------------------------------------------------

    def _request(self, view: Translated[AnyMessage]) -> Request:
        return Request(
            system=join_system((self._system, view.system)),
            tools=self._tools,
            messages=view.messages,
            max_output_tokens=self.guard.max_output_tokens,
        )

    def _learn(self, request: ModelRequest) -> tuple[Translated[AnyMessage], Request]:
        """Remember the system prompt, tools and model for `before_model` and the summaries."""
        self._system = request.system_prompt  # "": langchain sends an empty system message
        self._tools = _tool_specs(request.tools)
        if self.summary_model is None:
            self._model = request.model
        view = translate(request.messages, _read)
        return view, self._request(view)

    def _finish(self, response: Any, compacted: Translated[AnyMessage] | None) -> Any:
        """Stamp the reply's usage; with a compaction, persist the compacted state as well."""
        result = _result(response)
        for message in result.result:
            if isinstance(message, AIMessage):
                self._stamp(message)
        if compacted is None:
            return response
        update = _replace_all([*compacted.items, *result.result])
        return ExtendedModelResponse(model_response=result, command=Command(update=update))

    def _stamp(self, message: AIMessage) -> None:
        usage = _usage(message)
        stamp = {"compaction_id": self.guard.compaction_id, "timestamp": time.time()}
        message.response_metadata = {**message.response_metadata, STAMP_KEY: stamp}
        if usage is not None:
            self.guard.record(usage)


class _Sending:
    """One model call's request as sent: the original, or a compacted one mapped back to the
    agent's messages (every compacted message carries the index of its item in ``view``)."""

    def __init__(self, view: Translated[AnyMessage], ours: Request, request: ModelRequest) -> None:
        self.view = view
        self.ours = ours
        self.request = request
        self.compacted: Translated[AnyMessage] | None = None
        """The compacted messages last sent, to persist in the agent's state."""

    def model_request(self, sent: Request) -> ModelRequest:
        if sent.messages is self.ours.messages:
            return self.request
        messages = self.view.back_whole(sent.messages, _rebuild)
        self.compacted = translate(messages, _read)
        return self.request.override(messages=messages)


def _state_update(
    view: Translated[AnyMessage], request: Request, compacted: Request
) -> dict[str, Any] | None:
    if compacted.messages is request.messages:
        return None
    return _replace_all(view.back_whole(compacted.messages, _rebuild))


def _overflow(error: Exception) -> Exception | None:
    return overflow_of(error, known=isinstance(error, LangChainOverflow))


# -- translation -----------------------------------------------------------------------------


def _read(message: BaseMessage) -> tuple[Message, ...]:
    if isinstance(message, SystemMessage):
        return (Message(role="system", content=message.text),)
    if isinstance(message, ToolMessage):
        return (
            Message(
                role="tool",
                content=message.text,
                tool_call_id=message.tool_call_id,
                name=message.name,
            ),
        )
    if isinstance(message, AIMessage):
        calls = tuple(
            ToolCall(
                id=c.get("id") or "", name=c["name"], arguments=json.dumps(c.get("args") or {})
            )
            for c in message.tool_calls
        )
        return (
            Message(
                role="assistant", content=message.text, tool_calls=calls, usage=_usage(message)
            ),
        )
    return (Message(role="user", content=_content(message)),)


def _content(message: BaseMessage) -> str | tuple[TextPart | ImagePart, ...]:
    if isinstance(message.content, str):
        return message.content
    parts: list[TextPart | ImagePart] = []
    for block in message.content:
        if isinstance(block, str):
            parts.append(TextPart(block))
        elif block.get("type") == "text":
            parts.append(TextPart(str(block.get("text", ""))))
        elif block.get("type") in ("image_url", "image"):
            parts.append(_image(block))
    return tuple(parts)


def _image(block: dict[str, Any]) -> ImagePart:
    """An image block, in OpenAI's form (``image_url``: a URL or ``{"url", "detail"}``) or
    LangChain's own (``url``, or ``base64`` with ``mime_type``; before 1.0 ``data`` with
    ``source_type: "base64"``): a data URL's pixel size decides its tokens, as in a request."""
    spec = block.get("image_url")
    if spec is not None:
        detail = image_detail(spec.get("detail")) if isinstance(spec, dict) else None
        url = spec.get("url") if isinstance(spec, dict) else spec
        return image_from_url(url, detail) if isinstance(url, str) else ImagePart(detail=detail)
    url = block.get("url")
    if isinstance(url, str):
        return image_from_url(url)
    data = block.get("base64")
    if data is None and block.get("source_type") == "base64":
        data = block.get("data")
    if isinstance(data, str):
        mime = block.get("mime_type")
        return image_from_url(f"data:{mime if isinstance(mime, str) else ''};base64,{data}")
    return ImagePart()  # a file id: neither the bytes nor the size are in the message


def _usage(message: AIMessage) -> Usage | None:
    """``usage_metadata`` as our usage, with the compaction it was stamped under."""
    meta = message.usage_metadata
    if not meta:
        return None
    stamp = message.response_metadata.get(STAMP_KEY) or {}
    inputs = meta.get("input_token_details") or {}
    outputs = meta.get("output_token_details") or {}
    return Usage(
        input_tokens=int(meta.get("input_tokens") or 0),
        output_tokens=int(meta.get("output_tokens") or 0),
        cache_read_tokens=int(inputs.get("cache_read") or 0),
        cache_write_tokens=int(inputs.get("cache_creation") or 0),
        reasoning_tokens=int(outputs.get("reasoning") or 0),
        compaction_id=stamp.get("compaction_id"),
        timestamp=stamp.get("timestamp"),
    )


def _rebuild(original: AnyMessage | None, group: list[Message]) -> AnyMessage:
    if original is None:  # the handoff summary
        return HumanMessage(content=group[0].text)
    return original.model_copy(update={"content": group[0].text})


def _tool_specs(tools: Sequence[Any]) -> tuple[ToolSpec, ...]:
    converted = []
    for tool in tools:
        try:
            converted.append(convert_to_openai_tool(tool))
        except (TypeError, ValueError):
            continue  # a provider's built-in tool: no schema of ours to count
    return request_from_openai({"messages": [], "tools": converted}).tools


def _replace_all(messages: Sequence[BaseMessage]) -> dict[str, Any]:
    return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages]}


def _result(response: Any) -> ModelResponse:
    if isinstance(response, ExtendedModelResponse):
        return response.model_response
    if isinstance(response, AIMessage):
        return ModelResponse(result=[response])
    return response  # type: ignore[no-any-return]


# -- summaries with the agent's model --------------------------------------------------------


class _Summarizer:
    """The agent's own chat model, given the handoff request as a system + human message."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def summarize(self, request: Request) -> str:
        reply = self.model.invoke(_summary_messages(request))
        return str(reply.text)


class _LoopSummarizer(_Summarizer):
    """Called from compaction's worker thread; runs ``ainvoke`` on the caller's event loop."""

    def __init__(self, model: Any, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(model)
        self.loop = loop

    def summarize(self, request: Request) -> str:
        call = self.model.ainvoke(_summary_messages(request))
        return str(asyncio.run_coroutine_threadsafe(call, self.loop).result().text)


def _summary_messages(request: Request) -> list[BaseMessage]:
    system = [] if request.system is None else [SystemMessage(content=request.system)]
    return [*system, HumanMessage(content=request.messages[0].text)]
