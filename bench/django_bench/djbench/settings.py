"""Settings of the benchmark project: duecast's backend ("default") and django-tasks-db's reference
database backend ("ref") on the same MariaDB database, the one DUECAST_MYSQL__* names."""

import os

SECRET_KEY = "bench-only"  # noqa: S105 - a benchmark's throwaway project
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "django_tasks_db", "djbench"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ["DUECAST_MYSQL__DATABASE"],
        "USER": os.environ.get("DUECAST_MYSQL__USER", "root"),
        "PASSWORD": os.environ.get("DUECAST_MYSQL__PASSWORD", ""),
        "HOST": os.environ.get("DUECAST_MYSQL__HOST", "127.0.0.1"),
        "PORT": os.environ.get("DUECAST_MYSQL__PORT", "3306"),
        "OPTIONS": {"charset": "utf8mb4"},
    }
}
TASKS = {
    "default": {"BACKEND": "duecast.integrations.django.DuecastBackend"},
    "ref": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# duecast's own INFO lines stay (a worker's "working on", its counts at the stop): they say when each
# worker was ready, in the logs bench/django_api.py names.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"timed": {"format": "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "timed"}},
    "root": {"level": "WARNING"},
    "loggers": {"duecast": {"level": "INFO", "handlers": ["stderr"], "propagate": False}},
}
SILENCED_SYSTEM_CHECKS = ["duecast.W001"]  # the benchmark reads no results
