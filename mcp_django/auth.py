"""Authentication classes on the MCP endpoint, as Django REST framework's ``APIView`` runs them.

    MCP = {
        "SERVER": "myproject.mcp.server",
        "AUTHENTICATION_CLASSES": [
            "rest_framework.authentication.TokenAuthentication",
            "myproject.auth.ApiKeyAuthentication",
        ],
    }

Each entry is a dotted path to (or is) a class with DRF's interface: ``authenticate(request)``
returns ``(user, auth)`` or ``None``, and may raise DRF's ``AuthenticationFailed``;
``authenticate_header(request)`` names the scheme for a 401. DRF itself is optional: without
it a class gets the Django request. With the setting, the endpoint decides who is calling the
way an ``APIView`` does: the first class that authenticates sets ``request.user`` and
``request.auth`` (``request.auser()`` answers the same user); when none does the caller is
anonymous (the session user counts only if ``SessionAuthentication`` is listed); a failure
is answered with a JSON-RPC error, 401 with ``WWW-Authenticate`` when the first class names a
scheme, else 403. Without the setting, ``request.user`` is what the project's middleware made it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest
from django.utils.module_loading import import_string
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST

from mcp_common.http import HTTPResponse
from mcp_common.jsonrpc import error_response

logger = logging.getLogger("mcp_django")


def load_authenticators(entries: Any) -> tuple[Any, ...]:
    """One instance per configured class (a dotted path or the class itself)."""
    classes = [import_string(entry) if isinstance(entry, str) else entry for entry in entries or ()]
    return tuple(cls() for cls in classes)


def authenticate(request: HttpRequest, authenticators: tuple[Any, ...]) -> HTTPResponse | None:
    """Set ``request.user`` and ``request.auth`` from ``authenticators``; the refusal to send
    instead, when one of them refuses the credentials it was given.

    Blocking (authenticators read the database): under ASGI run it in a thread.
    """
    wrapped = _drf_request(request, authenticators)
    for authenticator in authenticators:
        try:
            found = authenticator.authenticate(wrapped)
        except Exception as exc:
            detail = _api_detail(exc)
            if detail is None:
                logger.exception("MCP: authentication class %s failed", type(authenticator).__name__)
                return error_response(500, INTERNAL_ERROR, "Internal server error")
            return _refusal(wrapped, authenticators, exc, detail)
        if found is not None:
            _set_user(request, found[0], found[1])
            return None
    from django.contrib.auth.models import AnonymousUser

    _set_user(request, AnonymousUser(), None)
    return None


def _set_user(request: HttpRequest, user: Any, auth: Any) -> None:
    """``request.user`` and ``request.auth``, and ``request.auser()`` answering the same user:
    ``AuthenticationMiddleware``'s reads the session, which counts only when a class said so,
    and async code (an async view's ``login_required``) asks it rather than ``request.user``."""

    async def auser() -> Any:
        return user

    request.user, request.auth, request.auser = user, auth, auser  # type: ignore[attr-defined]


def _drf_request(request: HttpRequest, authenticators: tuple[Any, ...]) -> Any:
    try:
        from rest_framework.request import Request
    except ImportError:
        return request
    return Request(request, authenticators=authenticators)


def _api_detail(exc: Exception) -> str | None:
    """The client-facing message of a DRF ``APIException`` (``None``: not one, a bug)."""
    try:
        from rest_framework.exceptions import APIException
    except ImportError:
        return None
    if not isinstance(exc, APIException):
        return None
    detail = exc.detail
    return str(detail) if not isinstance(detail, list | dict) else "Authentication failed"


def _refusal(request: Any, authenticators: tuple[Any, ...], exc: Exception, detail: str) -> HTTPResponse:
    from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated

    status = getattr(exc, "status_code", 403)
    if not isinstance(exc, AuthenticationFailed | NotAuthenticated):
        # Not about the credentials (a suspended key, a throttle): an APIView keeps its status,
        # and a 401 with a scheme would tell the client to send other credentials.
        wait = getattr(exc, "wait", None)
        headers = {"Retry-After": str(int(wait))} if wait else None
        return error_response(status, INVALID_REQUEST, detail, headers=headers)
    return _not_authenticated(request, authenticators, detail)


def _not_authenticated(request: Any, authenticators: tuple[Any, ...], detail: str) -> HTTPResponse:
    # DRF's rule: 401 with the first class's scheme when it has one, else 403.
    header = None
    scheme = getattr(authenticators[0], "authenticate_header", None) if authenticators else None
    if scheme is not None:
        header = scheme(request)
    if header:
        return error_response(401, INVALID_REQUEST, detail, headers={"WWW-Authenticate": header})
    return error_response(403, INVALID_REQUEST, detail)


def login_refusal(request: HttpRequest, authenticators: tuple[Any, ...]) -> HTTPResponse:
    """The answer to a caller the project's login requirement turned away from the endpoint
    (``LoginRequiredMiddleware``, ``login_required`` in the URLconf), instead of the redirect
    to the login page, which no MCP client follows: as an ``APIView`` answers one not signed
    in, 401 with the first authentication class's scheme, else (session authentication) 403."""
    return _not_authenticated(_drf_request(request, authenticators), authenticators, "Authentication required")
