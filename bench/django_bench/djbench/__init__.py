"""The Django project bench/django_api.py measures: one no-op task, two backends."""
