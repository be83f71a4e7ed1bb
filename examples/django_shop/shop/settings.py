"""Settings of the example shop. Its database is duecast's: the same DUECAST_MYSQL__* variables
every duecast role reads, so a job enqueued in a view's atomic() lands in duecast's jobs table."""

import os

if os.environ.get("SHOP_MYSQL_DRIVER") == "pymysql":  # instead of Django's default, mysqlclient
    import pymysql

    pymysql.install_as_MySQLdb()

SECRET_KEY = "example-only-not-secret"  # noqa: S105 - an example; a real project reads its own
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "shop.urls"
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ.get("DUECAST_MYSQL__DATABASE", "duecast"),
        "USER": os.environ.get("DUECAST_MYSQL__USER", "root"),
        "PASSWORD": os.environ.get("DUECAST_MYSQL__PASSWORD", ""),
        "HOST": os.environ.get("DUECAST_MYSQL__HOST", "127.0.0.1"),
        "PORT": os.environ.get("DUECAST_MYSQL__PORT", "3306"),
        "OPTIONS": {"charset": "utf8mb4"},
    }
}
# Django's task API, run by duecast: `duecast worker --app duecast.integrations.django.worker`.
TASKS = {
    "default": {
        "BACKEND": "duecast.integrations.django.DuecastBackend",
        "QUEUES": ["default"],
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
