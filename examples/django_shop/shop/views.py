"""POST /orders: the order and its receipt job in one transaction; GET /results/<id>: the job's result."""

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from shop.models import Order
from shop.tasks import notify_warehouse, send_receipt


def place_order(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    with transaction.atomic():
        order = Order.objects.create(email=body["email"], total_cents=body["total_cents"])
        receipt = send_receipt.enqueue(order.id)  # exists only if this block commits
        warehouse = notify_warehouse.enqueue(order.id)
        if body.get("fail"):
            raise ValueError("payment declined")  # rolls back the order and both jobs
    return JsonResponse({"order": order.id, "receipt": receipt.id, "warehouse": warehouse.id})


def result(request: HttpRequest, result_id: str) -> JsonResponse:
    found = send_receipt.get_backend().get_result(result_id)
    value = found.return_value if found.is_finished and not found.errors else None
    return JsonResponse({"status": str(found.status), "value": value, "attempts": found.attempts})
