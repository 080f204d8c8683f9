"""The gateway's logs: plain text or one JSON object a line (``--log-format json``), with no
conversation text in them unless the operator asks (``--log-messages``).

Structured fields travel on a record as ``extra={"fields": {...}}`` (`log_request` does it for a
request). Fields that hold conversation text (`CONTENT_FIELDS`: messages, summaries, replies...)
are dropped unless ``log_messages``; fields that hold secrets (`SECRET_FIELDS`) are always dropped.
An exception is logged with its type and stack; its message (which may quote a request) only
with ``log_messages``. uvicorn's own loggers write through the same formatter (`uvicorn_log_config`
is the ``log_config`` to give ``uvicorn.Config``); its access lines keep the path without the
query string (a client may put a key there).

A JSON line::

    {"ts": "2026-12-04T18:40:00.123Z", "level": "info", "logger": "ctxbudget.gateway",
     "event": "request", "api": "chat", "status": 200, "outcome": "compacted", ...}
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any, Final, Literal

__all__ = [
    "CONTENT_FIELDS",
    "GATEWAY_LOGGER",
    "LOG_FORMATS",
    "SECRET_FIELDS",
    "JsonFormatter",
    "LogFormat",
    "RequestLog",
    "TextFormatter",
    "configure_logging",
    "log_request",
    "uvicorn_log_config",
]

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")
GATEWAY_LOGGER: Final = "ctxbudget.gateway"

CONTENT_FIELDS: Final = frozenset(
    {"messages", "message_text", "content", "prompt", "input", "body", "reply", "summary", "text"}
)
"""Field names that hold conversation text: logged only with ``log_messages``."""
SECRET_FIELDS: Final = frozenset(
    {"authorization", "api_key", "x-api-key", "x_api_key", "key", "client_key", "upstream_key"}
)
"""Field names that would hold a key: never logged."""
_UVICORN_ACCESS: Final = "uvicorn.access"


def _fields(record: logging.LogRecord, log_messages: bool) -> dict[str, Any]:
    """The record's structured fields, less secrets, less conversation text unless asked."""
    raw = getattr(record, "fields", None)
    fields = dict(raw) if isinstance(raw, Mapping) else {}
    if record.name == _UVICORN_ACCESS and isinstance(record.args, tuple) and len(record.args) == 5:
        # uvicorn's access line: (client, method, full path, HTTP version, status).
        client, method, full_path, _, status = record.args
        fields.update(client=str(client), method=str(method), path=str(full_path).split("?", 1)[0])
        fields["status"] = status
    return {
        k: v
        for k, v in fields.items()
        if k.lower() not in SECRET_FIELDS and (log_messages or k.lower() not in CONTENT_FIELDS)
    }


def _event(record: logging.LogRecord) -> str:
    if record.name == _UVICORN_ACCESS and isinstance(record.args, tuple):
        return "access"  # the fields say the rest; the full path may hold a query string
    return record.getMessage()


def _exception(record: logging.LogRecord, log_messages: bool) -> dict[str, str]:
    if not record.exc_info or record.exc_info[0] is None:
        return {}
    kind, error, tb = record.exc_info
    out = {"exc_type": kind.__name__, "stack": "".join(traceback.format_tb(tb)).rstrip()}
    if log_messages:
        out["exc_message"] = str(error)
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts``, ``level``, ``logger``, ``event``, then the fields."""

    def __init__(self, *, log_messages: bool = False) -> None:
        super().__init__()
        self.log_messages = log_messages

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON (non-JSON values as their ``str``)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, Any] = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": _event(record),
        }
        for key, value in _fields(record, self.log_messages).items():
            out.setdefault(key, value)
        out.update(_exception(record, self.log_messages))
        return json.dumps(out, ensure_ascii=False, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``time level logger: event key=value ...`` (the same fields as the JSON lines)."""

    def __init__(self, *, log_messages: bool = False) -> None:
        super().__init__()
        self.log_messages = log_messages

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of text (plus the stack of an exception)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        fields = _fields(record, self.log_messages)
        pairs = " ".join(f"{k}={_value(v)}" for k, v in fields.items())
        line = f"{stamp} {record.levelname} {record.name}: {_event(record)}"
        line = f"{line} {pairs}" if pairs else line
        exc = _exception(record, self.log_messages)
        if exc:
            message = f": {exc['exc_message']}" if "exc_message" in exc else ""
            line = f"{line}\n{exc['stack']}\n{exc['exc_type']}{message}"
        return line


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _formatter(log_format: str, log_messages: bool) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter(log_messages=log_messages)
    if log_format == "text":
        return TextFormatter(log_messages=log_messages)
    from ctxbudget.errors import ConfigError

    raise ConfigError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")


def configure_logging(
    log_format: str = "text",
    *,
    log_messages: bool = False,
    level: str = "info",
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send the gateway's and uvicorn's logs to ``stream`` (stderr) in ``log_format``; returns
    the handler. Called again, it replaces the handler it installed before."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(_formatter(log_format, log_messages))
    handler.set_name("ctxbudget-gateway")
    for name in (GATEWAY_LOGGER, "uvicorn", "uvicorn.error", _UVICORN_ACCESS):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if h.get_name() == "ctxbudget-gateway"]:
            logger.removeHandler(old)
        if name != "uvicorn.error":  # it propagates to "uvicorn"
            logger.addHandler(handler)
        logger.setLevel(level.upper())
        logger.propagate = name == "uvicorn.error"
    return handler


def uvicorn_log_config(
    log_format: str = "text", *, log_messages: bool = False, level: str = "info"
) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for ``uvicorn.Config(log_config=...)``: uvicorn's and the
    gateway's loggers through our formatter, on stderr."""
    _formatter(log_format, log_messages)  # a bad format fails here, with its one line
    factory = JsonFormatter if log_format == "json" else TextFormatter
    logger = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": f"{__name__}.{factory.__name__}", "log_messages": log_messages}
        },
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            GATEWAY_LOGGER: logger,
            "uvicorn": logger,
            "uvicorn.error": {"level": level.upper()},  # propagates to "uvicorn"
            _UVICORN_ACCESS: logger,
        },
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLog:
    """One request as the gateway logs it: numbers and names, no conversation text."""

    api: str
    path: str
    status: int
    outcome: str
    conversation: str | None = None
    model: str | None = None
    stream: bool = False
    tokens_received: int | None = None
    tokens_forwarded: int | None = None
    window: int | None = None
    compacted: bool = False
    upstream_ms: float | None = None
    overhead_ms: float | None = None
    duration_ms: float | None = None


def log_request(
    entry: RequestLog,
    *,
    messages: Sequence[Mapping[str, Any]] | None = None,
    logger: logging.Logger | None = None,
) -> None:
    """Log one request (event ``request``). ``messages``, the conversation as forwarded, is
    written only when the formatter was configured with ``log_messages``."""
    fields: dict[str, Any] = {k: v for k, v in asdict(entry).items() if v is not None}
    if messages is not None:
        fields["messages"] = list(messages)
    target = logging.getLogger(GATEWAY_LOGGER) if logger is None else logger
    target.info("request", extra={"fields": fields})
