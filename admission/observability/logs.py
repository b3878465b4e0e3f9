"""JSON log lines: one object per line, with the ``extra`` fields of each record."""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from admission.clock import utcnow
from admission.core.base.timefmt import format_log_time

# Attributes every LogRecord has; anything else came in through ``extra``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JSONFormatter(logging.Formatter):
    """Formats a record as one JSON object: level, ts, logger, msg, then extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "level": record.levelname.lower(),
            "ts": format_log_time(datetime.fromtimestamp(record.created, UTC)),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        entry["msg"] = cap(entry["msg"])
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


MAX_STRING = 4096  # characters of one string value in a log line; longer ones are cut, with a marker


def cap(value: object, limit: int = MAX_STRING) -> object:
    """``value`` if it is short, else its start and how much was cut."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}…[truncated {len(value) - limit} characters]"
    return value


def emit(logger: logging.Logger, msg: str, fields: dict[str, Any]) -> None:
    """An info line in JSONFormatter's shape, written in one syscall, for the hot path.

    A decision is logged for every gated review; the logging module's record, lock and
    formatter cost a tenth of a review's time at load, this costs a JSON dump and a write.
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    entry = {"level": "info", "ts": format_log_time(utcnow()), "logger": logger.name, "msg": msg, **fields}
    os.write(2, orjson.dumps(entry, default=str) + b"\n")


def configure(level: str = "info") -> None:
    """Send JSON lines to stderr for our loggers and gunicorn's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # Python warnings become JSON lines too (logger py.warnings)
    for name in ("gunicorn.error", "gunicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
