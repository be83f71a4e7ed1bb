"""One MySQL connection per role, opened lazily and replaced after a connection error.

PyMySQL no longer reconnects by itself; a unit of work that hits a dropped connection fails
(the caller retries the whole unit) and the next unit gets a fresh connection.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, cast

import pymysql
import pymysql.cursors
from pymysql.constants import CLIENT

from ..settings import MySQLSettings
from .units import (
    DRIVER_ERRORS,
    READ_ONLY,
    ROLLED_BACK,
    CommitUnknown,
    Connection,
    Cursor,
    StorageError,
    TransientError,
    translate,
    translate_connect,
)

log = logging.getLogger("duecast.db")

# Errors after which the connection cannot be trusted: drop it so the next unit reconnects.
_UNKNOWN_SYSTEM_VARIABLE = 1193
_CR_SSL_CONNECTION_ERROR = 2026
_CONNECTION_ERRORS = (pymysql.err.OperationalError, pymysql.err.InterfaceError)


GROUP_CONCAT_MAX_LEN = 64 * 1024 * 1024
_TIMEOUT_ATTRIBUTES = ("_read_timeout", "_write_timeout")


def connect(settings: MySQLSettings, database: bool = True, *, idle_transaction_s: int = 0) -> Connection:
    """Open a connection: autocommit off, READ COMMITTED, utf8mb4, rowcount = rows matched; with
    `idle_transaction_s`, a session the server ends once idle that long inside a transaction.

    Connecting, the handshake and the session settings are bounded by mysql.connect_timeout_s per
    read (a server that accepts TCP and never answers holds a role that long, not read_timeout_s);
    statements after that by mysql.read_timeout_s. A failure names the server (host:port or socket)
    and the user, never the password.
    """
    try:
        conn = _open(settings, database, idle_transaction_s)
    except pymysql.err.MySQLError as exc:
        named = _with_timeout(exc, settings)
        named.add_note(server_note(settings))  # which server, for mysql_problem's one line
        if named is exc:
            raise
        raise named from exc
    # PyMySQL reads its timeouts from these at every read and write; there is no public setter
    # (tests/faults/servers/test_unanswered_servers.py fails if a PyMySQL release renames them).
    for name in _TIMEOUT_ATTRIBUTES:
        setattr(conn, name, settings.read_timeout_s)
    return conn


class _Connection(pymysql.Connection):  # generic in the stubs only: not subscriptable at run time
    """PyMySQL's connection, with its "preferred TLS" context (no TLS settings given: TLS if the
    server offers it, nothing verified; docs/security.md) made once per process, and only once a
    server offers TLS, instead of at every connect: building it loads the system's CA certificates
    (20-60 ms of CPU) while holding the GIL, which stalls every thread of the process, an
    application's event loop too, at each reconnect, and delays every role's start (issue 28)
    against a server that offers no TLS, where PyMySQL never uses it."""

    def _create_ssl_ctx(self, sslp: object) -> ssl.SSLContext:
        if sslp == {}:
            return _PREFERRED  # built by the `ctx` property if the handshake asks for it
        made: ssl.SSLContext = getattr(super(), "_create_ssl_ctx")(sslp)  # noqa: B009 - untyped in the stubs
        return made

    @property
    def ctx(self) -> ssl.SSLContext:
        made: ssl.SSLContext | None = self.__dict__.get("_duecast_ctx")
        if made is None:  # as before: PyMySQL sets it only when TLS is not disabled
            raise AttributeError("ctx")
        return _preferred_tls() if made is _PREFERRED else made

    @ctx.setter
    def ctx(self, made: ssl.SSLContext) -> None:
        self.__dict__["_duecast_ctx"] = made


# Stands for the preferred-TLS context until a handshake needs it (the `ctx` property swaps it).
_PREFERRED = cast(ssl.SSLContext, object())


@functools.cache
def _preferred_tls() -> ssl.SSLContext:
    made: ssl.SSLContext = pymysql.Connection._create_ssl_ctx(None, {})  # type: ignore[attr-defined]
    return made


def _open(settings: MySQLSettings, database: bool, idle_transaction_s: int) -> Connection:
    conn = _Connection(
        host=settings.host,
        port=settings.port,
        user=settings.user,
        password=settings.password.get_secret_value(),
        database=settings.database if database else None,
        unix_socket=settings.unix_socket,
        connect_timeout=settings.connect_timeout_s,
        # The handshake's reads: PyMySQL uses read_timeout for them, not connect_timeout.
        read_timeout=settings.connect_timeout_s,
        write_timeout=settings.connect_timeout_s,
        charset="utf8mb4",
        autocommit=False,
        # FOUND_ROWS: an UPDATE reports rows matched, so a fenced ack's rowcount is exact.
        client_flag=CLIENT.FOUND_ROWS,
        ssl=tls_context(settings) if settings.tls else None,
    )
    try:
        _set_session(conn, settings)
        if idle_transaction_s > 0:
            _limit_idle_transactions(conn, idle_transaction_s)
    except BaseException:
        conn.close()
        raise
    return conn


def _set_session(conn: Connection, settings: MySQLSettings) -> None:
    # PyMySQL before 1.2 went on in plaintext when the server offered no TLS: check the socket.
    if settings.tls and not isinstance(getattr(conn, "_sock", None), ssl.SSLSocket):
        raise pymysql.err.OperationalError(
            _CR_SSL_CONNECTION_ERROR, "mysql.tls is true but the server did not set up TLS"
        )
    with conn.cursor() as cur:
        # READ COMMITTED: no gap locks on the claim scan, and rows a locking read does not
        # match are unlocked at once, so SKIP LOCKED only skips rows someone is really working on.
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        # Short lock waits: duecast holds a row's lock only for a short transaction (a claim, start,
        # renewal, ack or requeue), so a long-held lock is an application's, and whoever waits for
        # one has a fallback (skip it, or retry) instead of stalling its loop.
        cur.execute("SET SESSION innodb_lock_wait_timeout = %s", (settings.lock_wait_s,))
        # MariaDB caps JSON_ARRAYAGG (range mode's packed read) at group_concat_max_len, 1 MiB by
        # default; a truncated value would only send the read down its slower path, but why pay.
        cur.execute("SET SESSION group_concat_max_len = %s", (GROUP_CONCAT_MAX_LEN,))
        try:
            # MariaDB turns an IN list of 1,000+ values into a subquery that may scan the table;
            # duecast's lists are ids it means to look up one by one. (MySQL has no such rewrite.)
            cur.execute("SET SESSION in_predicate_conversion_threshold = 0")
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != _UNKNOWN_SYSTEM_VARIABLE:
                raise


def _limit_idle_transactions(conn: Connection, seconds: int) -> None:
    """MariaDB (10.3+) ends a session left idle inside a transaction for `seconds`, rolling it back
    and releasing its locks: a worker stopped (SIGSTOP, a frozen VM) inside an ack holds duecast's
    rows that long at most, not for the whole stop. MySQL 8.0 has no such limit (1193, unknown
    variable): there such a transaction ends only with its connection (wait_timeout, a dead TCP
    peer), said once per process (docs/reliability.md)."""
    global _told_no_idle_limit  # noqa: PLW0603 - one line per process, not per connection
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION idle_transaction_timeout = %s", (seconds,))
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != _UNKNOWN_SYSTEM_VARIABLE:
            raise
        if not _told_no_idle_limit:
            _told_no_idle_limit = True
            log.warning(
                "this server has no idle_transaction_timeout (MySQL): a worker stopped inside a "
                "transaction keeps its rows locked until its connection ends (wait_timeout)",
                extra={"event": "db.no_idle_limit"},
            )


_told_no_idle_limit = False


def server_name(settings: MySQLSettings) -> str:
    """How errors name the server: its socket path or host:port."""
    return settings.unix_socket or f"{settings.host}:{settings.port}"


def _with_timeout(exc: pymysql.err.MySQLError, settings: MySQLSettings) -> pymysql.err.MySQLError:
    """A connect that timed out says which setting cut it off (the same class and code, so
    is_transient and translate see it as before); any other error is returned as it is."""
    said = " ".join(str(exc.args[-1] if exc.args else exc).split())
    if "timed out" not in said:
        return exc
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    limit = f"no answer within mysql.connect_timeout_s ({settings.connect_timeout_s:g}s)"
    return type(exc)(code, f"{said}; {limit}")


def tls_context(settings: MySQLSettings) -> ssl.SSLContext:
    """The TLS context for `mysql.tls = true`: verify the server (chain, then name) unless told not to."""
    ca = settings.tls_ca_file
    ctx = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
    if settings.tls_cert_file is not None:
        ctx.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if not settings.tls_verify:
        log.warning(
            "mysql.tls_verify is false: the connection to %s:%s is encrypted, but anyone on the "
            "network path can impersonate the server",
            settings.host,
            settings.port,
        )
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif not settings.tls_check_hostname:
        ctx.check_hostname = False
    return ctx


class Database:
    """Holds one lazily opened connection; `transaction()` is the only way to use it."""

    def __init__(self, settings: MySQLSettings, *, idle_transaction_s: int = 0) -> None:
        self._settings = settings
        # A worker's sessions: ended by the server once idle this long inside a transaction (0: never).
        self._idle_transaction_s = idle_transaction_s
        self._conn: Connection | None = None

    @property
    def settings(self) -> MySQLSettings:
        """What it connects with (a store's lease keeper opens its own connection with these)."""
        return self._settings

    @contextmanager
    def transaction(self, *, check: bool = False) -> Iterator[Cursor]:
        """Run a unit of work: commit on success, roll back on error, drop a broken connection.

        A driver error that leaves the block (or the COMMIT) comes out as duecast's own
        (`TransientError`, `DuplicateKey`, `ValueRefused`; storage.units), so callers never need the driver;
        one opening the connection as `NotConnected` (nothing was sent) or `StorageError` (access denied...);
        a connection lost at the COMMIT itself as `CommitUnknown` (it may have committed).

        `check=True` pings first and replaces a dead connection (server restart, KILL,
        wait_timeout) before the unit starts: for units whose input would be lost if their
        first statement failed, such as a worker's batch just popped from Redis.
        """
        conn = self._conn
        if conn is not None and check:
            try:
                conn.ping(reconnect=False)
            except _CONNECTION_ERRORS:
                self.close()
                conn = None
        if conn is None:
            try:
                conn = self._conn = connect(self._settings, idle_transaction_s=self._idle_transaction_s)
            except DRIVER_ERRORS as exc:
                raise translate_connect(exc, f"MySQL at {server_name(self._settings)}") from exc
        committing = False
        try:
            with conn.cursor() as cur:
                yield cur
            committing = True
            conn.commit()
        except _CONNECTION_ERRORS as exc:
            self.close()
            mine = translate(exc)
            if committing and type(mine) is TransientError and mine.code not in ROLLED_BACK:
                # The COMMIT went out and no answer came (the session killed, the server gone): it may
                # have committed. The caller re-reads under its fence (CommitUnknown), never guesses.
                raise CommitUnknown(str(mine), mine.code) from exc
            if mine is exc:
                raise
            raise mine from exc
        except BaseException as exc:
            try:
                conn.rollback()
            except _CONNECTION_ERRORS:
                self.close()
            mine = translate(exc)
            if mine is exc:
                raise
            raise mine from exc

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing a broken connection failed", exc_info=True)


# ------------------------------------------------------------- start-up failures, one line each

_NOTE = "duecast: MySQL "
_ACCESS_DENIED, _DB_ACCESS_DENIED, _UNKNOWN_DATABASE, _TOO_MANY_CONNECTIONS = 1045, 1044, 1049, 1040
_NO_SUCH_TABLE = 1146  # a command run before `duecast migrate`: the user's step to take, not a bug
_UNREACHABLE = {2002, 2003, 2005, 2006, 2013, 1927, 4031}
# The server takes no writes for now (units.READ_ONLY): a role backs off and carries on (one WARNING
# line, no traceback); the unit is not retried on the spot.
_TLS_REFUSED = 2026  # CR_SSL_CONNECTION_ERROR: mysql.tls = true and the server offers no TLS


def server_note(settings: MySQLSettings) -> str:
    where = settings.unix_socket or f"{settings.host}:{settings.port}"
    return f"{_NOTE}{where}, user {settings.user!r}, database {settings.database!r}"


def mysql_problem(exc: BaseException) -> tuple[str, bool] | None:  # noqa: PLR0911 - one per problem
    """A driver error (or duecast's for one) as (one line naming the server and setting and what to
    do, server unavailable?), or None when it is not about reaching or using the server (a bug, or a
    query's own error)."""
    if isinstance(exc, StorageError) and isinstance(exc.__cause__, pymysql.err.MySQLError):
        exc = exc.__cause__  # what the driver said, with the server connect() noted on it
    if not isinstance(exc, pymysql.err.MySQLError):
        return None
    notes = [n for n in getattr(exc, "__notes__", []) if n.startswith(_NOTE)]
    where = notes[0].removeprefix("duecast: ") if notes else "MySQL"
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    said = " ".join(str(exc.args[1]).split()) if len(exc.args) > 1 else type(exc).__name__
    if code == _UNKNOWN_DATABASE:
        return (
            f"{where}: the database does not exist ({said}); set mysql.database (settings file given by "
            "--config or DUECAST_CONFIG, or DUECAST_MYSQL__DATABASE), or run `duecast migrate` to create it",
            False,
        )
    if code == _NO_SUCH_TABLE:
        return f"{where}: {said}; run `duecast migrate`, or fix the table's name in the settings", False
    if code in (_ACCESS_DENIED, _DB_ACCESS_DENIED):
        return f"{where}: access denied ({said}); check mysql.user and mysql.password", False
    if code == _TOO_MANY_CONNECTIONS:
        return (
            f"{where}: too many connections ({code}); retry later, or raise the server's max_connections",
            True,
        )
    if code == _TLS_REFUSED:
        return (
            f"{where}: {said}; mysql.tls is true and the server offers no TLS: enable TLS on the "
            "server, or set mysql.tls = false (DUECAST_MYSQL__TLS) to connect in plaintext",
            True,
        )
    if code in _UNREACHABLE or isinstance(exc, pymysql.err.InterfaceError):
        return f"{where}: no connection ({said}); start MySQL, or fix mysql.host / mysql.port", True
    if code in READ_ONLY:
        return (
            f"{where}: the server is read-only ({code}: {said}); writes wait until it takes them "
            "again (a failover under way, or mysql.host names a replica)",
            True,
        )
    return None


class Closable(Protocol):
    def close(self) -> None: ...


def close_all(closables: Iterable[Closable]) -> None:
    """Close each session or store a role's serve() opened, as it ends: a serve() run inside a
    process (tests, an app embedding a role) must not leave its sessions to the garbage collector."""
    for closable in closables:
        closable.close()
