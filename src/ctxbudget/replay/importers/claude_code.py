"""Claude Code session JSONL: one API call per (``message.id``, ``requestId``).

Claude Code writes an assistant message over several lines, one per content block, and with
parallel tool calls puts each ``tool_result`` user line right after its ``tool_use`` line, so one
message is interleaved with user lines. As ccusage does, a call is the (message id, request id)
pair over the whole file and its usage is the largest any of its lines reports (early lines
carry a start-of-message snapshot). The usage is Anthropic's, read by `usage_from_anthropic`.
A main session leaves sidechain lines out; a sub-agent transcript (all sidechain) is its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ctxbudget.budget.usage import usage_from_anthropic
from ctxbudget.replay.importers._builder import CallBuilder, block_text, read_usage
from ctxbudget.replay.importers._lines import LineReader, Record, as_dict, as_int, as_list
from ctxbudget.replay.trace import Call

# Tuples, not sets: a record's "type" may be any JSON value, a list or object included.
_TYPES = ("user", "assistant", "system", "summary")
_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
MAX_REPLY_CHARS = 4 * 2**20
"""Text kept of one reply for the estimators: a 128K-token reply is about 0.5M characters, so
4M only cuts a crafted file (a million lines of one message), whose memory it bounds."""


def sniff(record: Record) -> bool:
    """True for a line that looks like Claude Code's."""
    return record.get("type") in _TYPES and ("sessionId" in record or "leafUuid" in record)


def _is_prompt(message: Record, record: Record) -> bool:
    """A real user prompt: text typed by the user, not a tool result or a meta line."""
    if record.get("isMeta") or record.get("isCompactSummary"):
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    blocks = [as_dict(b) for b in as_list(content)]
    return any(b.get("type") == "text" for b in blocks) and not any(
        b.get("type") == "tool_result" for b in blocks
    )


def _size(usage: Record) -> tuple[int, int]:
    """How a line's usage ranks: output first (it grows as the reply streams), then the rest."""
    return as_int(usage.get("output_tokens")), sum(as_int(usage.get(k)) for k in _USAGE_KEYS)


@dataclass(slots=True)
class _UserLine:
    text: str
    task: bool
    compaction: bool


class _Pending:
    """The assistant message being assembled from its lines, and the user lines that came
    between them (they belong to the next call)."""

    def __init__(self, key: tuple[str, str]) -> None:
        self.key = key
        self.parts: list[str] = []
        self.chars = 0
        self.cut_at = 0
        self.usage: Record = {}
        self.usage_line = 0
        self.model: str | None = None
        self.after: list[_UserLine] = []

    def add_line(self, message: Record, lineno: int) -> None:
        text = block_text(message.get("content"))
        room = MAX_REPLY_CHARS - self.chars
        if len(text) > room and not self.cut_at:
            self.cut_at = lineno
        if room > 0:
            self.parts.append(text[:room])
            self.chars += min(len(text), room)
        usage = as_dict(message.get("usage"))
        if usage and (not self.usage or _size(usage) > _size(self.usage)):
            self.usage, self.usage_line = usage, lineno
        self.model = str(message.get("model") or "") or self.model

    def flush(self, builder: CallBuilder, reader: LineReader) -> Iterator[Call]:
        """The call (if its usage is real), then the user lines for the next one."""
        if self.cut_at:
            reader.warnings.append(
                f"{reader.path.name}: line {self.cut_at}: reply text over {MAX_REPLY_CHARS:,} "
                "characters; the rest is not counted by the estimators"
            )
        call = self._to_call(builder, reader)
        if call is not None:
            yield call
        for line in self.after:
            builder.compacted = builder.compacted or line.compaction
            builder.add("user", line.text, task=line.task)

    def _to_call(self, builder: CallBuilder, reader: LineReader) -> Call | None:
        if not self.usage:
            return None
        usage = read_usage(usage_from_anthropic, self.usage, reader, f"line {self.usage_line}")
        if usage is None or usage.is_zero:  # "<synthetic>" error replies report all zeros
            return None
        return builder.call(usage=usage, reply="".join(self.parts), model=self.model)


def _key(record: Record, message: Record) -> tuple[str, str]:
    return str(message["id"]), str(record.get("requestId") or "")


def read(reader: LineReader, builder: CallBuilder) -> Iterator[Call]:
    """Calls of a Claude Code session, in order."""
    builder.reasoning = "unknown"  # thinking is not reported apart from output
    pending: _Pending | None = None
    # One small int per call already made: a line of one of them again (a resumed copy) is not
    # a new call. Bounded like the calls themselves (about 60 bytes each).
    done: set[int] = set()
    sidechain: bool | None = None  # decided by the first conversation line
    for lineno, record in reader:
        kind = record.get("type")
        message = as_dict(record.get("message"))
        if kind in ("user", "assistant") and message and sidechain is None:
            sidechain = bool(record.get("isSidechain"))
        if bool(record.get("isSidechain")) != bool(sidechain):
            continue
        if kind == "assistant" and message.get("id"):
            key = _key(record, message)
            if pending is not None and pending.key == key:
                pending.add_line(message, lineno)
                continue
            if hash(key) in done:
                continue
            if pending is not None:
                yield from pending.flush(builder, reader)
                done.add(hash(pending.key))
            pending = _Pending(key)
            pending.add_line(message, lineno)
        elif kind == "user" and message:
            line = _UserLine(
                block_text(message.get("content")),
                _is_prompt(message, record),
                bool(record.get("isCompactSummary")),
            )
            if pending is None:
                builder.compacted = builder.compacted or line.compaction
                builder.add("user", line.text, task=line.task)
            else:
                pending.after.append(line)
        elif kind == "summary":
            builder.compacted = True
    if pending is not None:
        yield from pending.flush(builder, reader)
