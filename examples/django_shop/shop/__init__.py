"""An example Django project whose tasks run on duecast (examples/django_shop/README.md)."""
