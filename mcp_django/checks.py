"""System checks: misconfiguration fails at start-up, not on the first request."""

from __future__ import annotations

import contextlib
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from mcp_common import _sdk

MAX_SECONDS = 10 * 365 * 24 * 3600
"""The longest duration a setting takes: ten years (``float("inf")`` or ``1e12`` is refused)."""

DURATIONS = (
    "SESSION_TTL",
    "REQUEST_TIMEOUT",
    "STREAM_HOLD_SECONDS",
    "POLL_INTERVAL",
    "REQUEST_STATE_TTL",
    "HEARTBEAT_INTERVAL",
    "BLOCKING_HOLD_SECONDS",
)
"""The settings given in seconds (``WAIT_DETACH_SECONDS`` and ``SQLITE_CHECKPOINT_INTERVAL`` too,
which may be 0)."""


@register("mcp")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from mcp_django.conf import DEFAULTS, mcp_settings

    messages: list[CheckMessage] = []
    user = mcp_settings.user_settings
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        messages.append(
            Error(
                f"Unknown MCP setting(s): {', '.join(unknown)}.",
                hint=f"Valid keys: {', '.join(sorted(DEFAULTS))}.",
                id="mcp_django.E001",
            )
        )
    server = user.get("SERVER")
    if server is None:
        for route, reference, _ in _routed_views():
            if reference is None:
                messages.append(
                    Error(
                        f'MCP["SERVER"] is not set, and /{route} serves it.',
                        hint='Set MCP = {"SERVER": "dotted.path.to.server"}, or give the view its own '
                        "(default_view(server=...)).",
                        id="mcp_django.E002",
                    )
                )
    else:
        from django.core.exceptions import ImproperlyConfigured

        from mcp_django.registry import resolve_server

        try:
            _sdk.lowlevel_server(resolve_server(server))
        except (ImproperlyConfigured, TypeError) as exc:
            messages.append(
                Error(
                    f'MCP["SERVER"] is not usable: {exc}',
                    hint="Point it at a module attribute holding an mcp.server.MCPServer.",
                    id="mcp_django.E002",
                )
            )
    for key in ("MAX_BODY_SIZE", "WAIT_RETRY_MS", *DURATIONS):
        value = user.get(key, DEFAULTS[key])
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:  # NaN too
            messages.append(Error(f'MCP["{key}"] must be a positive number, got {value!r}.', id="mcp_django.E003"))
        elif key in DURATIONS and not value <= MAX_SECONDS:
            messages.append(
                Error(
                    f'MCP["{key}"] must be at most {MAX_SECONDS} seconds (ten years), got {value!r}.',
                    hint="A longer one puts an expiry past the year 9999 (every resolver call fails), "
                    "a purge cut-off before year 1, or holds a stream for ever.",
                    id="mcp_django.E003",
                )
            )
    value = user.get("DB_THREADS", DEFAULTS["DB_THREADS"])
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        messages.append(Error(f'MCP["DB_THREADS"] must be a positive integer, got {value!r}.', id="mcp_django.E003"))
    for key in ("WAIT_DETACH_SECONDS", "SQLITE_CHECKPOINT_INTERVAL"):  # 0: off
        value = user.get(key, DEFAULTS[key])
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= MAX_SECONDS:
            messages.append(
                Error(
                    f'MCP["{key}"] must be a number of seconds from 0 to {MAX_SECONDS}, got {value!r}.',
                    id="mcp_django.E003",
                )
            )
    authentication = user.get("AUTHENTICATION_CLASSES") or ()
    if isinstance(authentication, str):
        authentication = (authentication,)
    from mcp_django.auth import load_authenticators

    for entry in authentication:
        try:
            (authenticator,) = load_authenticators([entry])
            if not callable(getattr(authenticator, "authenticate", None)):
                raise TypeError("it has no authenticate(request) method")
        except Exception as exc:
            messages.append(
                Error(
                    f'MCP["AUTHENTICATION_CLASSES"] entry {entry!r} is not usable: {exc}',
                    hint="List Django REST framework authentication classes (dotted paths) or classes like them.",
                    id="mcp_django.E005",
                )
            )
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    ours = "mcp_django.middleware.MCPMiddleware"
    hosts_checked = [m for m in ("django.middleware.common.CommonMiddleware",) if m in middleware]
    if hosts_checked and (ours not in middleware or middleware.index(ours) > middleware.index(hosts_checked[0])):
        messages.append(
            Warning(
                "MCP clients sending a Host outside ALLOWED_HOSTS get Django's HTML 400 page, not a JSON-RPC error.",
                hint=f'Put "{ours}" first in MIDDLEWARE.',
                id="mcp_django.W002",
            )
        )
    if len(settings.SECRET_KEY or "") < 32:
        messages.append(
            Warning(
                "SECRET_KEY is shorter than 32 characters; MCP request-state keys derived from it are weak.",
                id="mcp_django.W001",
            )
        )
    return messages


@register("mcp")
def check_elicitation_schemas(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every elicitation model a served server's tools can ask for must be flat and primitive."""
    from mcp_common.schemas import check_server_schemas

    messages: list[CheckMessage] = []
    for server in _served_servers():
        name = getattr(_sdk.lowlevel_server(server), "name", "?")
        for where, problem in check_server_schemas(server):
            messages.append(
                Error(
                    f"MCP server {name!r}, {where}: {problem}",
                    hint="Elicitation forms take flat models of str, int, float, bool and enum fields.",
                    id="mcp_django.E004",
                )
            )
    return messages


@register("mcp")
def check_permissions(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A permission on a served server's resource or prompt, which nothing would check."""
    from mcp_common.permissions import misused_decorators, unenforced_message, unenforced_permissions

    messages: list[CheckMessage] = []
    for server in _served_servers():
        name = getattr(_sdk.lowlevel_server(server), "name", "?")
        for what in unenforced_permissions(server):
            messages.append(Error(f"MCP server {name!r}: {unenforced_message(what)}", id="mcp_django.E006"))
        for problem in misused_decorators(server):
            messages.append(Error(f"MCP server {name!r}: {problem}", id="mcp_django.E008"))
    return messages


@register("mcp")
def check_server_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Different servers routed under one name (two unnamed ``MCPServer()`` are both "mcp-server")."""
    from mcp_common.config import shared_names

    routed = [(f"/{route}", _usable(reference)) for route, reference, _ in _routed_views()]
    return [
        Error(problem, id="mcp_django.E007")
        for problem in shared_names([(route, server) for route, server in routed if server is not None])
    ]


@register("mcp")
def check_tenant_apps(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """django-tenants: ``mcp_django`` must be a shared app only. In a tenant's schema its tables
    are where the endpoint's own database threads (the heartbeat, the poll for legacy answers,
    a call's work while it waits for its client) never look: their connections are set to the
    public schema, so legacy waits and heartbeats would fail mid-call, or, with the app in both
    lists, read the public schema's tables while requests write their tenant's."""
    from django.apps import apps

    if not hasattr(settings, "TENANT_APPS") and not hasattr(settings, "TENANT_TYPES"):
        return []
    config = apps.get_app_config("mcp_django")
    names = {config.name, f"{type(config).__module__}.{type(config).__qualname__}"}
    public = getattr(settings, "PUBLIC_SCHEMA_NAME", "public")
    types = getattr(settings, "TENANT_TYPES", None)
    if isinstance(types, dict):
        shared = list(types.get(public, {}).get("APPS", []))
        per_tenant = [app for name, kind in types.items() if name != public for app in kind.get("APPS", [])]
        where = "a tenant type's APPS in TENANT_TYPES"
    else:
        shared = list(getattr(settings, "SHARED_APPS", []))
        per_tenant = list(getattr(settings, "TENANT_APPS", []))
        where = "TENANT_APPS"
    hint = (
        'List "mcp_django" in SHARED_APPS only (the public type\'s APPS with TENANT_TYPES): one set of MCP tables '
        'in the public schema, each tenant\'s sessions and questions bound to it (README: "django-tenants"); '
        'then run "manage.py migrate_schemas --shared".'
    )
    if names & set(per_tenant):
        problem = (
            f"mcp_django is in {where}: its tables would be in each tenant's schema, which the MCP endpoint's "
            "own database threads (the heartbeat, the poll for legacy answers, a call's work while it waits "
            "for its client) never query: their connections are on the public schema."
        )
    elif not names & set(shared):
        problem = "mcp_django is not in SHARED_APPS: django-tenants creates its tables in no schema."
    else:
        return []
    return [Error(problem, hint=hint, id="mcp_django.E009")]


@register("mcp")
def check_login_required(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An endpoint whose callers authenticate by ``AUTHENTICATION_CLASSES`` (a token), behind
    ``LoginRequiredMiddleware``: the middleware sees no session and turns every such caller
    away (``MCPMiddleware`` answers its redirect as a 401) before the endpoint can authenticate them."""
    from mcp_django.conf import mcp_settings
    from mcp_django.expose import _login_middleware

    if not mcp_settings.AUTHENTICATION_CLASSES:
        return []  # request.user is the middleware's: the endpoint is guarded like any view
    try:
        guarded = _login_middleware(tuple(settings.MIDDLEWARE))
    except ImportError:
        return []  # a broken MIDDLEWARE entry is Django's to report
    if not guarded:
        return []
    return [
        Warning(
            f"/{route} authenticates its callers with MCP AUTHENTICATION_CLASSES, but LoginRequiredMiddleware "
            "turns away every caller without a session before the endpoint can authenticate them.",
            hint=f"Route it with login_not_required: {_open_route(route, server)}",
            id="mcp_django.W003",
        )
        for route, server, callback in _routed_views()
        if getattr(callback, "login_required", True)
    ]


WAL_OPTIONS = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"


@register(Tags.database)
def check_sqlite_journal(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The MCP tables in a SQLite file that syncs a rollback journal at every commit (SQLite's
    and Django's default): each question's two transactions then cost several times what they
    cost in WAL mode, and every reader waits while another worker commits. A database check,
    so it runs where a command names the database (``migrate``, ``check --database``)."""
    from django.db import DatabaseError, connections, router

    from mcp_django.models import MCPSession

    alias = router.db_for_write(MCPSession)
    if not databases or alias not in databases:
        return []
    connection = connections[alias]
    if connection.vendor != "sqlite" or connection.is_in_memory_db():
        return []
    try:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            (mode,) = cursor.fetchone()
    except DatabaseError:
        return []  # a database that cannot be opened: the command reports that itself
    if str(mode).lower() == "wal":
        return []
    return [
        Warning(
            f"The MCP tables are in the SQLite database {alias!r}, in journal mode {mode!r}: every "
            "elicitation's transactions sync a rollback journal to disk, several times slower than "
            "WAL mode, and readers wait while another worker commits.",
            hint=f'Add "init_command": "{WAL_OPTIONS}" to DATABASES["{alias}"]["OPTIONS"] '
            "(or run PRAGMA journal_mode=WAL once: the file keeps it).",
            id="mcp_django.W004",
        )
    ]


def _open_route(route: str, server: Any) -> str:
    """The ``path(...)`` that routes ``route`` to the same server, ``login_not_required``: a bare
    ``default_view()`` would serve ``MCP["SERVER"]`` there instead."""
    if server is None:
        return f'path("{route}", login_not_required(default_view())).'
    if isinstance(server, str):
        return f'path("{route}", login_not_required(default_view(server="{server}"))).'
    return f'path("{route}", login_not_required(default_view(server=...))), with the server it serves now.'


def _served_servers() -> list[Any]:
    """``MCP["SERVER"]`` and the servers of every MCP view in the URLconf, each once."""
    from mcp_django.conf import mcp_settings

    candidates: list[Any] = []
    if mcp_settings.user_settings.get("SERVER") is not None:
        candidates.append(None)
    candidates.extend(reference for _, reference, _ in _routed_views())
    servers: dict[int, Any] = {}
    for candidate in candidates:
        server = _usable(candidate)
        if server is not None:
            servers.setdefault(id(server), server)
    return list(servers.values())


def _usable(reference: Any) -> Any:
    """The server ``reference`` names (``None``: the setting's), or ``None`` if it names no
    usable server (``E002`` reports that)."""
    from django.core.exceptions import ImproperlyConfigured

    from mcp_django.registry import resolve_server

    try:
        server = resolve_server(reference)
        _sdk.lowlevel_server(server)
    except (ImproperlyConfigured, TypeError):
        return None
    return server


def _routed_views() -> list[tuple[str, Any, Any]]:
    """Each MCP view in the URLconf: its route, how it names its server (``None``: the
    setting's) and the view as routed (with the decorators the URLconf wraps it in)."""
    routed: list[tuple[str, Any, Any]] = []
    if not getattr(settings, "ROOT_URLCONF", None):
        return routed
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns: Any, prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern) and getattr(pattern.callback, "mcp_endpoint", False):
                # as_view(server=...), else the class's own (a subclass may set it).
                declared = getattr(getattr(pattern.callback, "view_class", None), "server", None)
                server = getattr(pattern.callback, "view_initkwargs", {}).get("server", declared)
                routed.append((prefix + str(pattern.pattern), server, pattern.callback))

    # A broken URLconf is reported by Django's own checks.
    with contextlib.suppress(Exception):
        walk(get_resolver().url_patterns, "")
    return routed
