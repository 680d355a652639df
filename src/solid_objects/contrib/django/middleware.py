"""``MIDDLEWARE += ["solid_objects.contrib.django.middleware.ProblemDetailsMiddleware"]``.

A view that lets a library error through (``Rejected``, ``InvalidArguments``,
``Unauthorized``, ``MailboxFull``, ``CallTimeout``, ...) is answered with RFC 9457
problem details, ``application/problem+json``, from the table every framework
integration shares (:mod:`solid_objects.contrib.problems`). Other exceptions are left
to Django.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from .. import problems


class ProblemDetailsMiddleware:
    """Django middleware: library errors raised by views become problem responses."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> Any:
        if problems.lookup(exception) is None:
            return None
        body = problems.document(exception)
        response = JsonResponse(body, status=body["status"], content_type=problems.MEDIA_TYPE)
        for name, value in problems.headers(exception).items():
            response[name] = value
        return response
