"""The shop's HTTP API, the same as the FastAPI shop's, as Django views."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from solid_objects import Ref
from solid_objects.contrib.django import ref

from .actors import Cart


def cart_of(request: HttpRequest, cart_id: str) -> Ref[Cart]:
    """The cart, called as the customer of the ``X-User`` header (stands in for a login)."""
    return ref(Cart, cart_id).with_options(authorization=request.headers.get("X-User"))


@require_POST
def add_item(request: HttpRequest, cart_id: str) -> JsonResponse:
    return JsonResponse({"count": cart_of(request, cart_id).add(sku=request.GET["sku"])})


@require_POST
def checkout(request: HttpRequest, cart_id: str) -> JsonResponse:
    return JsonResponse({"items": cart_of(request, cart_id).checkout()})


@require_GET
def contents(request: HttpRequest, cart_id: str) -> JsonResponse:
    return JsonResponse(cart_of(request, cart_id).contents())
