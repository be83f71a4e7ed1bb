"""The shop's tasks: plain Django `@task` functions; duecast's workers run them."""

try:
    from django.tasks import task  # Django >= 6.0
except ImportError:
    from django_tasks import task  # the backport, Django 4.2-5.2

from shop.models import Order


@task()
def send_receipt(order_id):
    order = Order.objects.get(pk=order_id)  # committed with the job: the view's atomic() made both
    return {"order": order.id, "to": order.email, "total_cents": order.total_cents}


@task(priority=50)
async def notify_warehouse(order_id):
    return {"order": order_id, "queued": True}
