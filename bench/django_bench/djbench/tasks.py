"""The task both backends run."""

from django_tasks import task


@task()
def noop(i: int) -> None:
    return None
