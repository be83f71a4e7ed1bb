"""duecast as a backend of Django's task API (`django.tasks` in Django 6, the `django-tasks` backport
before it): TASKS = {"default": {"BACKEND": "duecast.integrations.django.DuecastBackend"}} enqueues
`@task` functions as duecast jobs, and `duecast worker --app duecast.integrations.django.worker` runs
them (docs/django.md)."""

from .backend import DuecastBackend

__all__ = ["DuecastBackend"]
