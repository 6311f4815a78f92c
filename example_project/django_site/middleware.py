"""Test instrumentation: name the worker process that served each response.

On only when ``MCP_EXAMPLE_WORKER_HEADER=1`` (the test suite sets it to prove that a session
keeps working when its requests land on different workers). Never enable it in production:
process ids are nobody's business.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase


def worker_header(get_response: Callable[[HttpRequest], HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    def middleware(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        response["X-Example-Worker"] = str(os.getpid())
        return response

    return middleware
