"""TLS with certificate verification for MySQL, against a private MariaDB made for this module."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from duecast.shared.settings import MySQLSettings
from duecast.shared.storage import db
from duecast.shared.storage.db import Database, connect
from tests.integration.tls_servers import Pki, TLSMariaDB

pytestmark = pytest.mark.integration


# --- MariaDB ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_mariadb(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSMariaDB]:
    if TLSMariaDB.binaries() is None:
        pytest.skip("no mariadbd + mariadb-install-db on this machine to run a private TLS MariaDB")
    server = TLSMariaDB(tmp_path_factory.mktemp("mariadb"), pki)
    try:
        server.start()
        with server.root() as conn, conn.cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'have_ssl'")
            row = cur.fetchone()
            if row is None or row[1] != "YES":
                pytest.skip(f"this mariadbd has no TLS support (have_ssl = {row and row[1]})")
            # An account that must present a client certificate signed by the CA.
            cur.execute("CREATE USER 'dcsec_x509'@'127.0.0.1' REQUIRE X509")
            # ...and one that only requires an encrypted session (what docs/security.md warns of).
            cur.execute("CREATE USER 'dcsec_ssl'@'127.0.0.1' REQUIRE SSL")
        yield server
    finally:
        server.stop()


def mysql_tls(server: TLSMariaDB, pki: Pki, **overrides: Any) -> MySQLSettings:
    fields: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": server.port,
        "user": "root",
        "password": "",
        "connect_timeout_s": 5,
        "tls": True,
        "tls_ca_file": pki.ca,
    }
    return MySQLSettings(**{**fields, **overrides})


def session_tls(conn: pymysql.Connection[pymysql.cursors.Cursor]) -> tuple[str, str]:
    """The server's view of this session: (Ssl_version, Ssl_cipher); empty strings if plaintext."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        got = dict(cur.fetchall())
    return str(got.get("Ssl_version", "")), str(got.get("Ssl_cipher", ""))


def mysql_failure(settings: MySQLSettings) -> pymysql.err.OperationalError:
    with pytest.raises(pymysql.err.OperationalError) as info:
        connect(settings, database=False).close()
    return info.value


def test_mysql_verified_tls_connection(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    settings = mysql_tls(tls_mariadb, pki)
    conn = connect(settings, database=False)
    try:
        version, cipher = session_tls(conn)
        assert version.startswith("TLSv1.")
        assert cipher
    finally:
        conn.close()
    db = Database(settings.model_copy(update={"database": "mysql"}))
    try:
        with db.transaction() as cur:  # the role's path: a whole unit of work over TLS
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
    finally:
        db.close()


def test_mysql_wrong_ca_is_refused_with_a_clear_error(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    error = mysql_failure(mysql_tls(tls_mariadb, pki, tls_ca_file=pki.other_ca, password="pw-8c1d"))
    assert "CERTIFICATE_VERIFY_FAILED" in str(error)
    assert "pw-8c1d" not in str(error) + repr(error)


def test_mysql_without_a_ca_file_the_system_cas_do_not_trust_a_private_ca(
    tls_mariadb: TLSMariaDB, pki: Pki
) -> None:
    assert "CERTIFICATE_VERIFY_FAILED" in str(mysql_failure(mysql_tls(tls_mariadb, pki, tls_ca_file=None)))


def test_mysql_host_name_must_be_in_the_certificate(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    # root@localhost exists too, so only the certificate check can refuse this.
    error = mysql_failure(mysql_tls(tls_mariadb, pki, host="localhost"))
    assert "mismatch" in str(error).lower()

    conn = connect(mysql_tls(tls_mariadb, pki, host="localhost", tls_check_hostname=False), database=False)
    try:
        assert session_tls(conn)[1]
    finally:
        conn.close()


def test_mysql_verification_off_connects_and_logs_a_warning(
    tls_mariadb: TLSMariaDB, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    settings = mysql_tls(tls_mariadb, pki, tls_ca_file=None, tls_verify=False, password="")
    with caplog.at_level(logging.WARNING, logger="duecast.db"):
        conn = connect(settings, database=False)
    try:
        assert session_tls(conn)[1]  # still encrypted
    finally:
        conn.close()
    assert "mysql.tls_verify is false" in caplog.text


def test_mysql_client_certificate_for_a_require_x509_account(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    with_cert = mysql_tls(
        tls_mariadb, pki, user="dcsec_x509", tls_cert_file=pki.client_cert, tls_key_file=pki.client_key
    )
    conn = connect(with_cert, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone() == ("dcsec_x509@127.0.0.1",)
    finally:
        conn.close()

    error = mysql_failure(mysql_tls(tls_mariadb, pki, user="dcsec_x509"))
    assert error.args[0] == 1045  # access denied: no certificate


def test_only_require_x509_refuses_a_client_configured_without_tls(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    """Issue 25, item 11: with mysql.tls = false the driver still negotiates TLS (verifying nothing),
    so a REQUIRE SSL account lets that client in; REQUIRE X509 wants the certificate that only
    mysql.tls = true with mysql.tls_cert_file sends."""
    careless = {"tls": False, "tls_ca_file": None}
    conn = connect(mysql_tls(tls_mariadb, pki, user="dcsec_ssl", **careless), database=False)
    try:
        assert session_tls(conn)[0] != ""  # encrypted, yet nothing was verified
    finally:
        conn.close()
    error = mysql_failure(mysql_tls(tls_mariadb, pki, user="dcsec_x509", **careless))
    assert error.args[0] == 1045


def test_mysql_tls_required_never_falls_back_to_plaintext(mysql_settings: MySQLSettings, pki: Pki) -> None:
    """The shared test server: without TLS it must be refused; with TLS, our CA did not sign it."""
    settings = mysql_settings.model_copy(update={"tls": True, "tls_ca_file": pki.ca})
    error = mysql_failure(settings)
    text = str(error)
    assert "SSL is required" in text or "did not set up TLS" in text or "CERTIFICATE_VERIFY_FAILED" in text, (
        text
    )


def test_preferred_tls_context_is_built_only_for_a_server_that_offers_tls(
    mysql_settings: MySQLSettings, tls_mariadb: TLSMariaDB, pki: Pki
) -> None:
    """Issue 28: with mysql.tls = false, loading the system's CAs for the "preferred TLS" context is
    put off until a server offers TLS (20-60 ms of every role's start otherwise), and then it is used."""
    db._preferred_tls.cache_clear()
    conn = connect(mysql_settings, database=False)
    try:
        plaintext = session_tls(conn)[0] == ""
    finally:
        conn.close()
    if plaintext:  # the shared server offers no TLS: nothing was built
        assert db._preferred_tls.cache_info().currsize == 0
    careless = {"tls": False, "tls_ca_file": None}
    conn = connect(mysql_tls(tls_mariadb, pki, user="dcsec_ssl", **careless), database=False)
    try:
        assert session_tls(conn)[0] != ""
    finally:
        conn.close()
    assert db._preferred_tls.cache_info().currsize == 1
