"""`duecast topics ...`: the operator's view of and hands on topics and consumer groups.

Parsing and printing only; every statement runs in shared.storage.topic_admin,
shared.storage.topic_status or shared.api.publish.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..shared.api.publish import Publish, Publisher, PublishError, encode
from ..shared.fanout.client import connect_redis
from ..shared.process import arguments
from ..shared.settings import Settings, TopicsSettings, load_settings
from ..shared.states import STATE_NAMES, State
from ..shared.storage.db import Database
from ..shared.storage.topic_admin import TopicAdmin, TopicError, position
from ..shared.storage.topic_status import GroupStatus, TopicMonitor
from .formats import plain, shown
from .status_view import Keyed, fit

_MESSAGE_FIELDS = {"topic", "payload", "key"}
MAX_BAD_LINES = 50  # bad lines of a --file listed one by one; the rest are counted
MAX_ROWS = 10_000  # rows or buckets a command prints at most
MAX_BUCKET_S = 366 * 86400.0


def main(rest: list[str]) -> int:
    try:
        return _main(rest)
    except (TopicError, PublishError) as exc:
        print(f"duecast topics: {plain(exc, lines=True)}", file=sys.stderr)
        return 2


def _main(rest: list[str]) -> int:
    parser = arguments.parser("duecast topics", "Inspect and act on topics.")
    sub = arguments.subcommands(parser)
    sub.add_parser("status", help="per group: backlog, lag, in flight, dead, timeouts; topics by volume")
    pub = sub.add_parser("publish", help="publish one message, or a JSON Lines file (all or nothing)")
    pub.add_argument("topic", nargs="?", help="the topic to publish to (not with --file)")
    pub.add_argument("--payload", default="null", help="the message's JSON")
    pub.add_argument("--key", help="the message's key (find it with `duecast topics find`)")
    pub.add_argument("--file", type=Path, help='JSON Lines: {"topic": ..., "payload": ..., "key": ...}')
    show = sub.add_parser("show", help="one message and its trace in every group")
    show.add_argument("topic", help="the message's topic")
    show.add_argument("id", type=int, help="the message's id")
    find = sub.add_parser("find", help="messages published with a key, newest first")
    find.add_argument("topic", help="the topic to look in")
    find.add_argument("--key", required=True, help="the key the messages were published with")
    find.add_argument("--limit", type=int, default=20, help=f"messages to list at most (1-{MAX_ROWS})")
    reset = sub.add_parser("reset", help="move a group's position: replay from it (back) or skip to it")
    reset.add_argument("topic", help="the group's topic")
    reset.add_argument("group", help="the consumer group")
    reset.add_argument(
        "--to", required=True, help='"earliest", "latest", a message id, or an ISO time with zone'
    )
    reset.add_argument("--member", help="broadcast groups: only this member (default: all)")
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    volume = sub.add_parser("volume", help="messages published per hour (or --bucket-s) for a topic")
    volume.add_argument("topic", help="the topic to count")
    volume.add_argument("--buckets", type=int, default=24, help=f"how many, newest last (1-{MAX_ROWS})")
    volume.add_argument("--bucket-s", type=float, default=3600.0, help="each bucket's length in seconds")
    args = parser.parse_args(rest)
    _check_counts(args)
    settings = load_settings(args.config)
    if not settings.topics.names:
        raise TopicError("no topics are declared (topics.names)")
    console = Console()
    admin = TopicAdmin(Database(settings.mysql), settings.topics)
    if args.action == "publish":
        return _publish(console, settings, args)
    if args.action == "status":
        for table in topic_tables(TopicMonitor(admin.db, settings.topics)):
            console.print(*fit(table, console))
        return 0
    if args.action == "show":
        return _show(console, admin, args.topic, args.id)
    if args.action == "find":
        found = admin.find(args.topic, args.key, args.limit)
        console.print(*fit(_messages(found, f"key {args.key!r}"), console))
        return 0
    if args.action == "volume":
        return _volume(console, TopicMonitor(admin.db, settings.topics), args)
    return _reset(console, admin, settings.topics, args)


def _check_counts(args: argparse.Namespace) -> None:
    """Numbers that become LIMITs and intervals in SQL: in range, or one line naming the flag."""
    if args.action == "find" and not 1 <= args.limit <= MAX_ROWS:
        raise TopicError(f"--limit must be 1-{MAX_ROWS}, not {args.limit}")
    if args.action == "volume":
        if not 1 <= args.buckets <= MAX_ROWS:
            raise TopicError(f"--buckets must be 1-{MAX_ROWS}, not {args.buckets}")
        if not 1 <= args.bucket_s <= MAX_BUCKET_S:  # False for NaN too
            raise TopicError(f"--bucket-s must be 1-{MAX_BUCKET_S:.0f} s, not {args.bucket_s}")


def topic_tables(monitor: TopicMonitor) -> list[Table]:
    """The topics part of a status screen: consumer groups, then topics ranked by volume."""
    return [group_table(monitor.groups()), volume_table(monitor.volumes())]


def group_table(statuses: list[GroupStatus]) -> Table:
    table = Keyed(title="consumer groups", keys=2)  # a group is named by its topic and its name
    columns = ("topic", "group", "mode", "last id", "position", "backlog", "lag", "pending", "in flight")
    for col in (*columns, "dead", "timeouts", "skipped", "alerts"):
        table.add_column(col, justify="left" if col in ("topic", "group", "mode", "alerts") else "right")
    for s in statuses:
        alerts = []
        if s.timeouts:
            alerts.append(f"{s.timeouts} running > timeout (oldest {s.oldest_running_s or 0:.0f}s)")
        if s.behind_retention:
            alerts.append("behind retention: kept for it")
        if s.mode == "broadcast":
            live = sum(1 for m in s.members if m.live)
            alerts.append(f"{live} live member(s)")
        table.add_row(
            shown(s.topic),
            shown(s.group),
            s.mode,
            f"{s.last_id:,}",
            f"{s.position:,}",
            f"{s.backlog:,}",
            "-" if s.lag_s is None else f"{s.lag_s:.1f}s",
            f"{s.pending:,}",
            f"{s.in_flight:,}",
            f"{s.dead:,}",
            f"{s.timeouts:,}",
            f"{s.skipped:,}",
            "; ".join(alerts),
        )
    return table


def volume_table(volumes: list[tuple[str, int, dict[str, int]]]) -> Table:
    table = Table(title="topics, busiest first (messages published)")
    for col in ("topic", "last id", "last minute", "last hour", "last day"):
        table.add_column(col, justify="left" if col == "topic" else "right")
    for name, last, counts in volumes:
        table.add_row(
            shown(name), f"{last:,}", f"{counts['minute']:,}", f"{counts['hour']:,}", f"{counts['day']:,}"
        )
    return table


def _publish(console: Console, settings: Settings, args: argparse.Namespace) -> int:
    if (args.topic is None) == (args.file is None):
        raise PublishError("give a TOPIC or --file, not both")
    publisher = Publisher(settings, connect_redis(settings.redis))
    if args.file is not None:
        messages = read_messages(args.file, settings.topics)
        ids = publisher.publish_many(messages)
        console.print(shown(f"published {len(ids):,} message(s) from {args.file}"))
        return 0
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise PublishError(f"--payload is not JSON: {exc}") from exc
    message_id = publisher.publish(args.topic, payload, key=args.key)
    console.print(shown(f"published message {message_id} to {args.topic}"))
    return 0


def read_messages(path: Path, topics: TopicsSettings) -> list[Publish]:
    """Every non-blank line as a message, each checked as publishing would (topic, key, JSON, size)
    before any is published; PublishError names every bad line (the first MAX_BAD_LINES of them)."""
    if not path.is_file():
        raise PublishError(f"{path}: no such file")
    out: list[Publish] = []
    bad: list[str] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                message = _message(line)
                encode(message, topics)
            except PublishError as exc:
                bad.append(f"{path}:{number}: {exc}")
                continue
            out.append(message)
    if bad:
        more = f"\n  ... and {len(bad) - MAX_BAD_LINES} more" if len(bad) > MAX_BAD_LINES else ""
        listed = "\n  ".join(bad[:MAX_BAD_LINES])
        raise PublishError(f"{len(bad)} bad line(s), nothing was published:\n  {listed}{more}")
    return out


def _message(line: str) -> Publish:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PublishError(f"not JSON: {exc}") from exc
    if not isinstance(item, dict) or "topic" not in item or set(item) - _MESSAGE_FIELDS:
        raise PublishError('expected {"topic": ..., "payload": ..., "key": ...}')
    return Publish(item["topic"], item.get("payload"), item.get("key"))


def _show(console: Console, admin: TopicAdmin, topic: str, message_id: int) -> int:
    message = admin.message(topic, message_id)
    if message is None:
        console.print(shown(f"no message {message_id} in {topic} (never published, or deleted by retention)"))
        return 1
    console.print(*fit(_messages([message], f"{topic} message {message_id}"), console))
    for group, trace in admin.trace(topic, message_id).items():
        console.print(*fit(_trace_table(group, trace), console))
    return 0


def _messages(messages: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=shown(title))
    for col in ("id", "key", "published at", "payload"):
        table.add_column(col)
    for m in messages:
        table.add_row(
            str(m["seq"]), shown(m["msg_key"] or "-"), _cell(m["created_at"]), shown(str(m["payload"])[:200])
        )
    return table


def _trace_table(group: str, trace: dict[str, Any]) -> Table:
    table = Table(title=shown(f"group {group}"))
    for col in ("attempt", "outcome", "dispatched", "started", "ended", "worker", "error"):
        table.add_column(col)
    for a in trace["attempts"]:
        error = (a["error"] or "").strip().splitlines()
        table.add_row(
            str(a["attempt"]),
            a["outcome"],
            _cell(a["dispatched_at"]),
            _cell(a["started_at"]),
            _cell(a["ended_at"]),
            _cell(a["worker"]),
            shown(error[-1][:100]) if error else "",
        )
    d = trace["delivery"]
    if d is not None:
        error = (d["last_error"] or "").strip().splitlines()
        state = STATE_NAMES[State(d["dc_state"])]
        table.add_row(
            str(d["dc_attempt"]),
            f"{state} (now)" + (f", replayed {d['replays']}x" if d["replays"] else ""),
            _cell(d["dc_dispatched_at"]),
            _cell(d["started_at"]),
            _cell(d["finished_at"]),
            _cell(d["worker"]),
            shown(error[-1][:100]) if error else "",
        )
    elif trace["read_by"]:
        table.add_row("-", shown(f"read by {', '.join(trace['read_by'])}"), "", "", "", "", "")
    else:
        table.add_row("-", "not delivered to this group yet", "", "", "", "", "")
    return table


def _cell(value: object) -> Text:
    """A value as `topics show` prints it: `-` for a time or worker not (yet) recorded, never `None`."""
    return shown("-" if value is None or value == "" else value)


def _volume(console: Console, monitor: TopicMonitor, args: argparse.Namespace) -> int:
    counts = monitor.series(args.topic, args.buckets, args.bucket_s)
    table = Table(title=shown(f"{args.topic}: messages per {args.bucket_s:g} s, oldest first"))
    table.add_column("ago")
    table.add_column("published", justify="right")
    for k, n in enumerate(counts):
        ago = (len(counts) - k) * args.bucket_s
        table.add_row(f"{ago:g}s - {ago - args.bucket_s:g}s", f"{n:,}")
    console.print(*fit(table, console))
    return 0


def _reset(console: Console, admin: TopicAdmin, topics: TopicsSettings, args: argparse.Namespace) -> int:
    try:
        group = topics.group(args.topic, args.group)
    except KeyError as exc:
        raise TopicError(str(exc.args[0])) from exc
    try:
        position(args.to)  # before asking: a bad --to is refused, not confirmed
    except TopicError as exc:
        raise TopicError(f"--to: {exc}") from None
    question = plain(f"move group {args.group} of {args.topic} to {args.to}?")
    if not args.yes and not _confirm(console, question):
        console.print("nothing changed")
        return 1
    out = admin.reset(group, args.to, args.member)
    if group.mode == "broadcast":
        console.print(
            shown(f"{out.group}: {out.replayed:,} member(s) now read after id {out.new_position:,}")
        )
    elif out.new_position < out.old_position:
        console.print(
            shown(f"{out.group}: replay after id {out.new_position:,}: {out.replayed:,} message(s) again")
        )
    else:
        console.print(shown(f"{out.group}: position {out.old_position:,} -> {out.new_position:,} (skipped)"))
    return 0


def _confirm(console: Console, question: str) -> bool:
    try:
        return console.input(f"{question} [y/N] ").strip().lower() in {"y", "yes"}
    except EOFError:
        return False
