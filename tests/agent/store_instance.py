"""One "gateway instance" for the shared-store tests, run as a child process:

    python store_instance.py STATE_SPEC NAME [SUMMARY_DELAY_S]

It opens the store (`open_store`), prints ``{"ready": true}``, then serves one conversation
(key ``conv``) as the gateway does: for each JSON line ``{"messages": [records]}`` on stdin it
restores the session from the store, prepares the request (a new turn), saves, and prints
``{"sent": [records], "calls": N, "events": [...]}`` (N: summaries this process has written).
Its summarizer prints ``{"summarizing": true}`` when called, then takes ``SUMMARY_DELAY_S``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from ctxbudget.agent.budget_session import BudgetSession
from ctxbudget.agent.session_store import open_store
from ctxbudget.compaction.records import message_from_record, message_to_record
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Request

WINDOW = 2048
KEY = "conv"


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class NamedSummarizer:
    """Writes summaries that say which instance wrote them and its call number. Its window
    holds any fold, so one compaction is one call."""

    window = 131_072

    def __init__(self, name: str, delay: float) -> None:
        self.name, self.delay, self.calls = name, delay, 0

    def summarize(self, request: Request) -> str:
        self.calls += 1
        say({"summarizing": True})
        time.sleep(self.delay)
        return f"Summary {self.calls} by {self.name}: the user discussed many topics."


def main() -> None:
    spec, name = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    store = open_store(spec)
    summarizer = NamedSummarizer(name, delay)
    events: list[str] = []
    session = BudgetSession(
        window=WINDOW,
        counter=RequestCounter("qwen3"),
        summarizer=summarizer,
        strategy="summarize",
        store=store,
        key=KEY,
        on_event=lambda kind, data: events.append(kind),
    )
    say({"ready": True})
    for line in sys.stdin:
        messages = [message_from_record(m) for m in json.loads(line)["messages"]]
        request = Request(system="Be brief.", messages=tuple(messages), max_output_tokens=256)
        session.restore(store, KEY)
        sent = session.prepare(request, new_turn=True)
        session.save(store, KEY)
        say(
            {
                "sent": [message_to_record(m) for m in sent.messages],
                "calls": summarizer.calls,
                "events": events,
            }
        )


if __name__ == "__main__":
    main()
