"""Views for the request checks (shop/checks_requests.py): refs from the URL, keyed calls."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from solid_objects.contrib.django import idempotency_keys, ref

from .actors import DjangoOrders, DjangoTally


@require_POST
def add(request: HttpRequest, tally_id: str) -> JsonResponse:
    tally = ref(DjangoTally, tally_id, authorization=request.headers.get("x-user"))
    keys = idempotency_keys(request)
    return JsonResponse({"total": keys.keyed(tally.add)(n=int(request.POST["n"]))})


@require_GET
def total(request: HttpRequest, tally_id: str) -> JsonResponse:
    tally = ref(DjangoTally, tally_id, authorization=request.headers.get("x-user"))
    return JsonResponse({"total": tally.add(n=0)})


@require_POST
def place(request: HttpRequest, orders_id: str) -> JsonResponse:
    orders = ref(DjangoOrders, orders_id)
    keys = idempotency_keys(request, required=True)
    return JsonResponse({"placed": keys.keyed(orders.place)(sku=request.POST["sku"])})
