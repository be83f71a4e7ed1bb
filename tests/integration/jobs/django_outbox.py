"""A Django process enqueueing in its own transactions (run by test_outbox_frameworks.py, one process per
MySQL driver: PyMySQL's install_as_MySQLdb() replaces mysqlclient for the whole process).

`python -m tests.integration.jobs.django_outbox pymysql|mysqlclient`; the servers, database, jobs table
and key prefix come from DUECAST_*. Prints one JSON object: what it saw of the wake-ups and the driver.
"""

from __future__ import annotations

import json
import os
import sys

import django
import pymysql
from django.conf import settings
from django.db import connection, transaction  # the backend's driver loads at first use

from duecast import Enqueuer

DRIVER = sys.argv[1]
BUSINESS = os.environ["OUTBOX_TABLE"]


class Boom(Exception):
    pass


def configure() -> None:
    if DRIVER == "pymysql":
        pymysql.install_as_MySQLdb()  # what Django users on PyMySQL do
    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.mysql",
                "NAME": os.environ["DUECAST_MYSQL__DATABASE"],
                "USER": os.environ["DUECAST_MYSQL__USER"],
                "PASSWORD": os.environ.get("DUECAST_MYSQL__PASSWORD", ""),
                "HOST": os.environ["DUECAST_MYSQL__HOST"],
                "PORT": os.environ["DUECAST_MYSQL__PORT"],
            }
        },
        USE_TZ=True,
    )
    django.setup()


def main() -> None:
    configure()
    enqueuer = Enqueuer.connect()
    assert enqueuer.client is not None
    wake = enqueuer.keys.wake()
    enqueuer.client.delete(wake)
    seen: dict[str, object] = {}

    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(f"INSERT INTO `{BUSINESS}` (note) VALUES (%s)", ("django-commit",))
        enqueuer.enqueue("record", {"django": DRIVER, "case": "commit"}, conn=connection)
        enqueuer.enqueue("record", {"django": DRIVER, "case": "commit, again"}, conn=connection)
        seen["wakes_owed"] = sum(1 for entry in connection.run_on_commit if entry[1] == enqueuer.wake)
        seen["woken_before_commit"] = enqueuer.client.llen(wake)
    seen["woken_after_commit"] = enqueuer.client.llen(wake)

    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"INSERT INTO `{BUSINESS}` (note) VALUES (%s)", ("django-rollback",))
            enqueuer.enqueue("record", {"django": DRIVER, "case": "rollback"}, conn=cur)  # a Django cursor
            raise Boom
    except Boom:
        pass

    enqueuer.client.delete(wake)
    # Outside atomic(): Django's autocommit; the job is written in a transaction of duecast's own.
    enqueuer.enqueue("record", {"django": DRIVER, "case": "autocommit"}, conn=connection)
    seen["woken_autocommit"] = enqueuer.client.llen(wake)
    seen["driver"] = type(connection.connection).__module__
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
