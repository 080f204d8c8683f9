"""``context_budget_filter``: the OpenAI Agents SDK's model input kept inside the window.

``RunConfig(call_model_input_filter=budget)`` compacts what each model call is sent; the SDK
resends its whole history every turn, so the filter remembers the compacted view and sends it in
place of the part it replaced. ``budget.run_config()`` also sets ``budget.retry`` (compact and
retry once after an overflow); ``Runner.run(..., hooks=budget.hooks)`` makes counts usage-first.
"""

from __future__ import annotations

import asyncio
from typing import Any, Unpack

from ctxbudget.budget.usage import usage_from_openai_responses
from ctxbudget.extras import require
from ctxbudget.integrations._guard import ContextGuard, GuardOptions, overflow_of
from ctxbudget.integrations._responses import as_item, read_item, rebuild_item
from ctxbudget.integrations._view import Substitution, Translated, UsageMemory, translate
from ctxbudget.messages.model import Request, ToolSpec, join_system

require("agents", "openai-agents", "ctxbudget.integrations.openai_agents")

from agents import (  # noqa: E402  (after the dependency check)
    Agent,
    ModelRetrySettings,
    ModelSettings,
    RunConfig,
    RunContextWrapper,
    RunHooks,
)
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model, ModelTracing  # noqa: E402
from agents.retry import RetryDecision, RetryPolicyContext  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402

__all__ = ["ContextBudgetFilter", "context_budget_filter"]

Item = Any  # a TResponseInputItem: a dict in the Responses API's input format


def context_budget_filter(
    *,
    window: int,
    summary_model: Model | None = None,
    **options: Unpack[GuardOptions],
) -> ContextBudgetFilter:
    """A ``call_model_input_filter`` keeping each model call inside ``window`` tokens.

    Summaries are written by the agent's model when it is a `Model` object (``summary_model``
    replaces it); with a model name and no ``summary_model``, compaction clears and truncates.
    The other keywords (``tokenizer``, ``policy``, ...) are `ContextGuard`'s.
    """
    guard = ContextGuard(window=window, **options)
    return ContextBudgetFilter(guard, summary_model=summary_model)


class ContextBudgetFilter:
    """Called by the runner before each model call with the input it is about to send."""

    def __init__(self, guard: ContextGuard, *, summary_model: Model | None = None) -> None:
        self.guard = guard
        self.summary_model = summary_model
        self.hooks = _UsageHooks(self)
        """Run hooks recording each reply's usage: pass ``hooks=budget.hooks`` to the runner."""
        self._substitution: Substitution[Item] = Substitution()
        self._memory = UsageMemory()
        self._last: tuple[ModelInputData, Translated[Item], Request, Translated[Item]] | None = None
        self._model: Model | None = summary_model

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """The model input, compacted when the rule fires for it."""
        full = translate([as_item(i) for i in data.model_data.input], read_item)
        view = translate(self._substitution.apply(full), read_item)
        request = self._request(view, data.model_data.instructions, data.agent)
        self._learn_model(data.agent)
        compacted = await asyncio.to_thread(
            self.guard.prepare, request, summarizer=self._summarizer(), new_turn=True
        )
        if compacted.messages is not request.messages:
            # The request is read again from the new view: an overflow's recovery maps its
            # messages back through that view, by the item indices it holds.
            view = self._compacted(full, view, compacted)
            request = self._request(view, data.model_data.instructions, data.agent)
        out = ModelInputData(input=list(view.items), instructions=data.model_data.instructions)
        self._memory.sent = view.messages
        self._last = (out, full, request, view)
        return out

    async def retry(self, context: RetryPolicyContext) -> bool | RetryDecision:
        """A retry policy: after an overflow, compact the failed input in place and retry once.

        A second overflow of the same input raises `CompactionError`, as every adapter does.
        """
        overflow = overflow_of(context.error)
        if overflow is None or self._last is None:
            return False
        if context.attempt > 1:
            # Not counted again: the runner reports this overflow's own numbers (see
            # `BudgetSession`'s notes, 4).
            raise self.guard.fail(context.error, count=False) from context.error
        out, full, request, view = self._last
        compacted = await asyncio.to_thread(
            self.guard.recover, request, overflow, summarizer=self._summarizer()
        )
        view = self._compacted(full, view, compacted)
        out.input[:] = list(view.items)  # the runner resends this very list
        self._memory.sent = view.messages
        self._last = (out, full, compacted, view)
        return RetryDecision(retry=True, delay=0.0, reason="compacted after a context overflow")

    def retry_settings(self) -> ModelRetrySettings:
        """``ModelSettings(retry=...)`` for `retry`: one retry, right away.

        ``max_retries`` is 2 so that the SDK asks `retry` about the second failure too (it
        skips the policy past ``max_retries``): `retry` answers that one itself, raising
        `CompactionError` for a second overflow and declining anything else.
        """
        return ModelRetrySettings(max_retries=2, backoff={"initial_delay": 0.0}, policy=self.retry)

    def run_config(self, **kwargs: Any) -> RunConfig:
        """A ``RunConfig`` with this filter and its retry (``hooks`` go to ``Runner.run``)."""
        settings = kwargs.pop("model_settings", None) or ModelSettings()
        settings = settings.resolve(ModelSettings(retry=self.retry_settings()))
        return RunConfig(call_model_input_filter=self, model_settings=settings, **kwargs)

    # -- helpers ---------------------------------------------------------------------------------

    def _request(
        self, view: Translated[Item], instructions: str | None, agent: Agent[Any]
    ) -> Request:
        return Request(
            system=join_system((instructions or None, view.system)),  # empty instructions: none
            tools=_tool_specs(agent),
            messages=self._memory.attach(view.messages),
            max_output_tokens=self.guard.max_output_tokens,
        )

    def _learn_model(self, agent: Agent[Any]) -> None:
        if self.summary_model is None and isinstance(agent.model, Model):
            self._model = agent.model

    def _summarizer(self) -> _Summarizer | None:
        """Summaries by the agent's model, called back on this event loop (none: a model name)."""
        return _Summarizer(self._model, asyncio.get_running_loop()) if self._model else None

    def _compacted(
        self, full: Translated[Item], view: Translated[Item], compacted: Request
    ) -> Translated[Item]:
        items = view.back(compacted.messages, rebuild_item)
        self._substitution.update(full, items)
        return translate([*view.items[: view.lead], *items], read_item)

    def _record(self, response: ModelResponse) -> None:
        usage = response.usage  # the Responses API's shape, whatever the model's API
        if not usage.input_tokens:
            return
        raw = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "input_tokens_details": {"cached_tokens": usage.input_tokens_details.cached_tokens},
            "output_tokens_details": {
                "reasoning_tokens": usage.output_tokens_details.reasoning_tokens
            },
        }
        self._memory.usage = self.guard.record(usage_from_openai_responses(raw))


class _UsageHooks(RunHooks[Any]):
    """Records the usage of every model reply for the next count."""

    def __init__(self, owner: ContextBudgetFilter) -> None:
        self.owner = owner

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self.owner._record(response)


def _tool_specs(agent: Agent[Any]) -> tuple[ToolSpec, ...]:
    specs = []
    for tool in agent.tools:
        schema = getattr(tool, "params_json_schema", None)
        if isinstance(schema, dict):
            specs.append(ToolSpec(tool.name, getattr(tool, "description", "") or "", schema))
    return tuple(specs)


# -- summaries with the agent's model ----------------------------------------------------------


class _Summarizer:
    """Called from compaction's worker thread; runs the model call on the run's event loop."""

    def __init__(self, model: Model, loop: asyncio.AbstractEventLoop) -> None:
        self.model = model
        self.loop = loop

    def summarize(self, request: Request) -> str:
        call = self.model.get_response(
            system_instructions=request.system,
            input=[{"role": "user", "content": request.messages[0].text}],
            model_settings=ModelSettings(max_tokens=request.max_output_tokens),
            tools=[],
            output_schema=None,
            handoffs=[],
            tracing=ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )
        reply = asyncio.run_coroutine_threadsafe(call, self.loop).result()
        texts = []
        for item in reply.output:
            for part in getattr(item, "content", None) or ():
                texts.append(getattr(part, "text", "") or "")
        return "".join(texts)
