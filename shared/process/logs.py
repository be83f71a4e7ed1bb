"""Process logging: the human format (default), or one JSON object per line (`log_format = "json"`),
with repeated warnings and errors rate-limited to one line per cause per interval (RepeatFilter).

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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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


REPEAT_INTERVAL_S = 10.0  # the interval over which a cause's lines are limited
REPEAT_BURST = 2  # lines a cause writes per interval (two: a retry is seen to repeat)
_MAX_CAUSES = 1000  # causes remembered at once; past it, those whose interval has ended are forgotten


@dataclass
class _Cause:
    window_end: float  # when the current interval of this cause ends
    shown: int = 1  # lines written in it so far
    suppressed: int = 0  # lines dropped in it so far


def cause_of(record: logging.LogRecord) -> tuple[str, str, str, str]:
    """(logger, message template, exception, subject): what makes two lines "the same".

    The template is `record.msg` before its arguments (`handler failed for %s id=%s`), so rows and
    ids do not make causes. The exception is the record's (exc_info) or the first one among its
    arguments, by type and, for a server's error, its code (a deadlock, 1213, is not a lost
    session, 2013). A template that starts with its subject as an argument (`%s hit %s; retrying
    ...`, shared by every retried unit) keys on that subject too: one unit's retries do not hide
    another's.
    """
    template = str(record.msg)
    args = record.args if isinstance(record.args, tuple) else ()
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None:
        exc = next((a for a in args if isinstance(a, BaseException)), None)
    code = getattr(exc, "code", None)
    kind = "" if exc is None else type(exc).__name__ + (f":{code}" if isinstance(code, int) else "")
    subject = str(args[0])[:200] if template.startswith("%s") and args else ""
    return record.name, template, kind, subject


class RepeatFilter(logging.Filter):
    """At most `burst` WARNING-or-worse lines per cause per `interval_s`; the next line after an
    interval in which some were dropped says how many: `... (N more like this in 10 s)`.

    A downstream service failing every call so logs two tracebacks per interval instead of one per
    row (a worker wrote 9.9 MB in 7 minutes before). Another exception, template, subject or logger
    is another cause (cause_of) and is written at once. INFO and DEBUG lines pass untouched: they
    are the operator's chosen chatter, not a failure's echo.
    """

    def __init__(
        self,
        interval_s: float = REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        burst: int = REPEAT_BURST,
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.burst = burst
        self._clock = clock
        self._causes: dict[tuple[str, str, str, str], _Cause] = {}
        self._lock = threading.Lock()  # a handler calls its filters outside its own lock

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        with self._lock:
            return self._admit(record, self._clock())

    def _admit(self, record: logging.LogRecord, now: float) -> bool:
        key = cause_of(record)
        cause = self._causes.get(key)
        if cause is not None and now < cause.window_end:
            if cause.shown < self.burst:
                cause.shown += 1
                return True
            cause.suppressed += 1
            return False
        if cause is not None and cause.suppressed:
            self._note_repeats(record, cause.suppressed)
        if cause is None and len(self._causes) >= _MAX_CAUSES:
            live = {k: c for k, c in self._causes.items() if now < c.window_end}
            # Still crowded with open intervals: forget them all (at worst one line each too many),
            # so neither the memory nor the cost of this sweep grows with the causes.
            self._causes = live if len(live) < _MAX_CAUSES // 2 else {}
        self._causes[key] = _Cause(now + self.interval_s)
        return True

    def _note_repeats(self, record: logging.LogRecord, count: int) -> None:
        """Append the count of the lines dropped since this cause's last line (the event name stays
        the template's: it is fixed before the message changes)."""
        record.event = event_name(record)
        record.repeated = count
        record.msg = f"{record.getMessage()} ({count:,} more like this in {self.interval_s:g} s)"
        record.args = None


def setup(level: str, fmt: LogFormat = "human") -> None:
    """Log to stderr in `fmt`, repeated failures rate-limited. Like logging.basicConfig, a no-op when
    the root logger already has a handler (an embedding application's, or pytest's)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(HUMAN_FORMAT))
    handler.addFilter(RepeatFilter())
    logging.basicConfig(level=level, handlers=[handler])
    quiet_libraries(level)


# Libraries whose INFO lines are chatter (APScheduler: ~6 lines every 5 s, "Running job ...",
# "executed successfully"); their warnings and errors still show. log_level = DEBUG shows all.
QUIET_LOGGERS = ("apscheduler",)


def quiet_libraries(level: str) -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
