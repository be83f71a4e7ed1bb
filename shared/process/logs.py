"""Process logging: the human format (default), or one JSON object per line (`log_format = "json"`).

A JSON line carries a stable `event` name: the one a log call gives in `extra={"event": ...}`, else one
derived from its logger and message template. Its other `extra` fields (source, job_id, count...) are
kept as fields. Secrets never reach a log call in the first place (docs/security.md).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sys
from datetime import UTC, datetime
from typing import Any, Literal

HUMAN_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"
LogFormat = Literal["human", "json"]

# The attributes every LogRecord has; anything else on a record came from a call's `extra`.
_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_WORDS = re.compile(r"[a-z]+")


def process_id() -> str:
    """host:pid, the same value a job's `worker` column records, so a job leads to its log lines."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}"


def event_name(record: logging.LogRecord) -> str:
    """The record's `event`, or `<logger without "duecast.">.<first words of the template>`.

    The template (`record.msg`, before its arguments are filled in) is the same for every line of a
    call, so the derived name is stable while the call's wording is.
    """
    given = getattr(record, "event", None)
    if isinstance(given, str) and given:
        return given
    words = _WORDS.findall(str(record.msg).lower().replace("%s", " ").replace("%d", " "))[:4]
    return f"{record.name.removeprefix('duecast.')}.{'_'.join(words) or 'message'}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, event, message, process, then the call's extras."""

    def __init__(self) -> None:
        super().__init__()
        self._process = process_id()

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": event_name(record),
            "message": record.getMessage(),
            "process": self._process,
            "thread": record.threadName,
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and key != "event" and key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def setup(level: str, fmt: LogFormat = "human") -> None:
    """Log to stderr in `fmt`. Like logging.basicConfig, a no-op when the root logger already has a
    handler (an embedding application's, or pytest's)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(HUMAN_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    quiet_libraries(level)


# Libraries whose INFO lines are chatter (APScheduler: ~6 lines every 5 s, "Running job ...",
# "executed successfully"); their warnings and errors still show. log_level = DEBUG shows all.
QUIET_LOGGERS = ("apscheduler",)


def quiet_libraries(level: str) -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
