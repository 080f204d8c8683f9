"""A guard around an ``openai.OpenAI`` / ``AsyncOpenAI`` client: chat completions and responses.

``guarded.chat.completions.create(...)`` and ``guarded.responses.create(...)`` take and return
what the SDK's do. Your message list stays yours and is never changed: once the guard has
compacted, it sends the compacted view in place of the part of your list it replaced;
``guarded.messages`` is the list last sent.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from ctxbudget.budget.usage import usage_from_openai, usage_from_openai_responses
from ctxbudget.errors import ContextOverflowError, CtxbudgetError
from ctxbudget.integrations._guard import ContextGuard, GuardOptions, only_overflow, overflow_of
from ctxbudget.integrations._responses import as_item, read_item, rebuild_item, tool_specs
from ctxbudget.integrations._streams import AsyncUsageStream, UsageStream
from ctxbudget.integrations._view import Substitution, Translated, UsageMemory, translate
from ctxbudget.messages.model import Message, Request, ToolSpec, join_system
from ctxbudget.messages.openai import (
    message_from_openai,
    message_to_openai,
    request_from_openai,
    request_to_openai,
)
from ctxbudget.messages.usage import Usage
from ctxbudget.providers.overflow import classify_error

__all__ = ["ContextBudgetOpenAI", "guard_openai"]

Item = dict[str, Any]


def guard_openai(
    client: Any,
    *,
    window: int,
    summary_model: str | None = None,
    **options: Unpack[GuardOptions],
) -> ContextBudgetOpenAI:
    """``client`` (``OpenAI`` or ``AsyncOpenAI``) kept inside ``window`` tokens.

    Summaries are written by the same client with the call's model (or ``summary_model``).
    The other keywords (``tokenizer``, ``policy``, ...) are `ContextGuard`'s.
    """
    guard = ContextGuard(window=window, **options)
    return ContextBudgetOpenAI(client, guard, summary_model=summary_model)


# -- the two APIs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Api:
    """What differs between chat completions and responses: names, items, tools, usage."""

    key: str
    """The request field holding the conversation."""
    item: Callable[[Any], Item]
    """One entry of that field as a dict."""
    endpoint: Callable[[Any], Any]
    read: Callable[[Item], Sequence[Message]]
    rebuild: Callable[[Item | None, list[Message]], Item]
    tools: Callable[[Mapping[str, Any]], tuple[ToolSpec, ...]]
    usage: Callable[[object], Usage]
    summary_body: Callable[[Request, str], dict[str, Any]]
    summary_text: Callable[[Any], str]


def _chat_tools(kwargs: Mapping[str, Any]) -> tuple[ToolSpec, ...]:
    body = {k: kwargs[k] for k in ("tools", "functions") if kwargs.get(k)}
    return request_from_openai({**body, "messages": []}).tools


def _chat_summary(request: Request, model: str) -> dict[str, Any]:
    return {**request_to_openai(request, include_reasoning=False), "model": model}


def _responses_summary(request: Request, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "instructions": request.system,
        "input": [{"role": "user", "content": request.messages[0].text}],
        "max_output_tokens": request.max_output_tokens,
    }


def _chat_item(message: Any) -> Item:
    if isinstance(message, Mapping):
        return dict(message)
    # A ChatCompletionMessage appended as it came: only what a request message may carry.
    dumped = message.model_dump(exclude_none=True)
    return {k: v for k, v in dumped.items() if k in _MESSAGE_KEYS}


_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "function_call")

CHAT = _Api(
    key="messages",
    item=_chat_item,
    endpoint=lambda client: client.chat.completions,
    read=lambda item: (message_from_openai(item),),
    rebuild=lambda original, group: message_to_openai(group[0], include_reasoning=False),
    tools=_chat_tools,
    usage=usage_from_openai,
    summary_body=_chat_summary,
    summary_text=lambda reply: str(reply.choices[0].message.content or ""),
)
RESPONSES = _Api(
    key="input",
    item=as_item,
    endpoint=lambda client: client.responses,
    read=read_item,
    rebuild=rebuild_item,
    tools=lambda kwargs: tool_specs(kwargs.get("tools") or ()),
    usage=usage_from_openai_responses,
    summary_body=_responses_summary,
    summary_text=lambda reply: str(reply.output_text or ""),
)


@dataclass(slots=True)
class _Conversation:
    """One API's conversation: the compacted prefix and the usage of the last reply."""

    api: _Api
    substitution: Substitution[Item] = field(default_factory=Substitution)
    memory: UsageMemory = field(default_factory=UsageMemory)


# -- the guarded client --------------------------------------------------------------------------


class ContextBudgetOpenAI:
    """The guarded client: ``.chat.completions`` and ``.responses`` as the SDK's, plus
    ``.guard`` (the budget's state); everything else is the client's own, unguarded."""

    def __init__(self, client: Any, guard: ContextGuard, *, summary_model: str | None) -> None:
        self.client = client
        self.guard = guard
        self.summary_model = summary_model
        self.is_async = _is_async(client)
        self.messages: list[Item] = []
        """The message (or input item) list last sent, compacted where the guard compacted."""
        self.chat = _Namespace(client.chat, completions=self._endpoint(CHAT))
        self.responses = self._endpoint(RESPONSES)

    def __getattr__(self, name: str) -> Any:
        if name == "client":
            raise AttributeError(name)  # not set yet (copy, unpickling): no recursion
        return getattr(self.client, name)

    def _endpoint(self, api: _Api) -> _Endpoint | _AsyncEndpoint:
        kind = _AsyncEndpoint if self.is_async else _Endpoint
        return kind(self, _Conversation(api))

    def plan(
        self, conversation: _Conversation, kwargs: Mapping[str, Any]
    ) -> tuple[Translated[Item], Translated[Item], Request]:
        """(your list, the list to send, its request): the compacted view stands in for the
        prefix of your list it replaced."""
        api = conversation.api
        given = kwargs[api.key]
        items = [as_item(given)] if isinstance(given, str) else [api.item(m) for m in given]
        full = translate(items, api.read)
        view = translate(conversation.substitution.apply(full), api.read)
        # Empty instructions add no system message (vLLM's Responses server, the Agents SDK);
        # an empty system message in the list is one, kept.
        system = join_system((kwargs.get("instructions") or None, view.system))
        request = Request(
            system=system,
            tools=api.tools(kwargs),
            messages=conversation.memory.attach(view.messages),
            max_output_tokens=self.guard.max_output_tokens,
            model=kwargs.get("model"),
        )
        return full, view, request

    def view_of(
        self,
        conversation: _Conversation,
        full: Translated[Item],
        view: Translated[Item],
        planned: Request,
        sent: Request,
    ) -> Translated[Item]:
        """The list to send for ``sent``: ``view`` as planned, or the compacted list, remembered
        in place of the whole of your list. Every message of a compacted request carries the
        index of its item in ``view`` (the summary none), however often it was compacted."""
        if sent.messages is planned.messages:
            return view
        items = view.back(sent.messages, conversation.api.rebuild)
        conversation.substitution.update(full, items)
        return translate([*view.items[: view.lead], *items], conversation.api.read)

    def sent(self, conversation: _Conversation, view: Translated[Item]) -> None:
        self.messages = list(view.items)
        conversation.memory.sent = view.messages

    def record(self, conversation: _Conversation, usage: object) -> None:
        """Keep a reply's usage as the base of the next count (an unreadable one: count)."""
        if usage is None:
            return
        raw = usage.model_dump() if hasattr(usage, "model_dump") else usage
        try:
            conversation.memory.usage = self.guard.record(conversation.api.usage(raw))
        except CtxbudgetError:
            conversation.memory.usage = None

    def summary_call(self, api: _Api, request: Request, model: str) -> Any:
        """The summary request, sent unguarded: it is one self-contained message."""
        body = api.summary_body(request, self.summary_model or model)
        return api.endpoint(self.client).create(**body)


class _Namespace:
    """``guarded.chat``: the client's ``chat`` with ``completions`` guarded."""

    def __init__(self, inner: Any, **guarded: Any) -> None:
        self._inner = inner
        self.__dict__.update(guarded)

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


class _Endpoint:
    """``create`` with the guard: compact when the rule fires, retry once after an overflow."""

    def __init__(self, owner: ContextBudgetOpenAI, conversation: _Conversation) -> None:
        self.owner = owner
        self.conversation = conversation

    def __getattr__(self, name: str) -> Any:
        if name in ("owner", "conversation"):
            raise AttributeError(name)
        return getattr(self.conversation.api.endpoint(self.owner.client), name)

    def create(self, **kwargs: Any) -> Any:
        """As the SDK's ``create``; ``messages`` (``input``) is your whole conversation."""
        owner, guard, conversation = self.owner, self.owner.guard, self.conversation
        if _server_side_state(kwargs):
            return conversation.api.endpoint(owner.client).create(**kwargs)
        full, view, request = owner.plan(conversation, kwargs)
        summarizer = _Summarizer(owner, conversation.api, kwargs.get("model") or "")

        def send(sent: Request) -> Any:
            return self._send(owner.view_of(conversation, full, view, request, sent), kwargs)

        return guard.run(request, send, summarizer=summarizer, new_turn=True)

    def _send(self, view: Translated[Item], kwargs: dict[str, Any]) -> Any:
        owner, conversation = self.owner, self.conversation
        body = _body(conversation.api, kwargs, list(view.items))
        try:
            result = conversation.api.endpoint(owner.client).create(**body)
        except Exception as error:
            raise _overflow(error) or error from None
        owner.sent(conversation, view)
        if body.get("stream"):
            return UsageStream(result, lambda usage: owner.record(conversation, usage))
        owner.record(conversation, getattr(result, "usage", None))
        return result


class _AsyncEndpoint(_Endpoint):
    """The ``AsyncOpenAI`` flavour of `_Endpoint`; compaction runs off the event loop."""

    async def create(self, **kwargs: Any) -> Any:
        """As the SDK's ``await create``; ``messages`` (``input``) is your whole conversation."""
        owner, guard, conversation = self.owner, self.owner.guard, self.conversation
        if _server_side_state(kwargs):
            return await conversation.api.endpoint(owner.client).create(**kwargs)
        full, view, request = owner.plan(conversation, kwargs)
        summarizer = _LoopSummarizer(owner, conversation.api, kwargs.get("model") or "")

        async def send(sent: Request) -> Any:
            return await self._send_async(
                owner.view_of(conversation, full, view, request, sent), kwargs
            )

        return await guard.arun(request, send, summarizer=summarizer, new_turn=True)

    async def _send_async(self, view: Translated[Item], kwargs: dict[str, Any]) -> Any:
        owner, conversation = self.owner, self.conversation
        body = _body(conversation.api, kwargs, list(view.items))
        try:
            result = await conversation.api.endpoint(owner.client).create(**body)
        except Exception as error:
            raise _overflow(error) or error from None
        owner.sent(conversation, view)
        if body.get("stream"):
            return AsyncUsageStream(result, lambda usage: owner.record(conversation, usage))
        owner.record(conversation, getattr(result, "usage", None))
        return result


# -- summaries -----------------------------------------------------------------------------------


class _Summarizer:
    """Summaries from the guarded client itself, with the call's model."""

    def __init__(self, owner: ContextBudgetOpenAI, api: _Api, model: str) -> None:
        self.owner = owner
        self.api = api
        self.model = model

    def summarize(self, request: Request) -> str:
        return self.api.summary_text(self.owner.summary_call(self.api, request, self.model))


class _LoopSummarizer(_Summarizer):
    """Called in compaction's worker thread; runs the async call on the caller's event loop."""

    def __init__(self, owner: ContextBudgetOpenAI, api: _Api, model: str) -> None:
        super().__init__(owner, api, model)
        self.loop = asyncio.get_running_loop()

    def summarize(self, request: Request) -> str:
        call = self.owner.summary_call(self.api, request, self.model)
        return self.api.summary_text(asyncio.run_coroutine_threadsafe(call, self.loop).result())


# -- helpers -------------------------------------------------------------------------------------


def _server_side_state(kwargs: Mapping[str, Any]) -> bool:
    # With previous_response_id or a conversation the server holds the history: we cannot see
    # it, so the call goes through as it is.
    return bool(kwargs.get("previous_response_id") or kwargs.get("conversation"))


def _body(api: _Api, kwargs: Mapping[str, Any], items: list[Item]) -> dict[str, Any]:
    body = {**kwargs, api.key: items}
    if api is CHAT and body.get("stream") and "stream_options" not in body:
        body["stream_options"] = {"include_usage": True}  # the usage the next count starts from
    return body


def _overflow(error: Exception) -> ContextOverflowError | None:
    response = getattr(error, "response", None)
    status = getattr(error, "status_code", None)
    if response is None or not isinstance(status, int):
        return None
    try:
        text = response.text
    except Exception:  # a streamed error body that was never read
        return overflow_of(error)
    return only_overflow(classify_error(status, text), error) or overflow_of(error)


def _is_async(client: Any) -> bool:
    import openai  # a dependency; imported here because it takes about a second

    if isinstance(client, openai.AsyncOpenAI):
        return True
    return inspect.iscoroutinefunction(client.chat.completions.create)
