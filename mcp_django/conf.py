"""``settings.MCP``: one namespaced dict, read through a lazy object with defaults.

    MCP = {
        "SERVER": "myproject.mcp.server",   # dotted path to an MCPServer
        "ALLOWED_ORIGINS": [],               # besides same-origin requests
        "MAX_BODY_SIZE": 4 * 1024 * 1024,
        "SESSION_TTL": 86400,                # seconds a legacy session may stay idle
        "REQUEST_TIMEOUT": 600,              # seconds a tool waits for the client's answer
        "SSE_RETRY_MS": 1000,
        "STREAM_HOLD_SECONDS": 25,
        "POLL_INTERVAL": 0.1,
        "REQUEST_STATE_TTL": 600,            # seconds a 2026-07-28 requestState (and its questions) lives
        "HEARTBEAT_INTERVAL": 10,            # seconds between a worker's heartbeats
        "WAIT_DETACH_SECONDS": 0.25,         # WSGI: free the thread of a call waiting this long
        "WAIT_RETRY_MS": 1000,               # ... and tell the client to resume after this
        "BLOCKING_HOLD_SECONDS": 0.5,        # WSGI: how long a GET or resumed call stream is held
        "DB_THREADS": 8,                     # database threads per MCP URL and process (connections)
        "JSON_RESPONSE": False,
        "ASYNC_VIEW": None,                  # None: async when settings.ASGI_APPLICATION is set
        "AUTHENTICATION_CLASSES": [],        # DRF-style classes deciding who calls (mcp_django.auth)
        "SQLITE_CHECKPOINT_INTERVAL": 0.2,    # SQLite WAL: checkpoint off the request path (0: in commits)
    }

Host checks use ``ALLOWED_HOSTS``; request-state keys derive from ``SECRET_KEY`` and
``SECRET_KEY_FALLBACKS``. The object is rebuilt when a test changes ``MCP`` with
``override_settings``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from mcp_common.config import MCPConfig, secret_chain

DEFAULTS: dict[str, Any] = {
    "SERVER": None,
    "ALLOWED_ORIGINS": [],
    "MAX_BODY_SIZE": 4 * 1024 * 1024,
    "SESSION_TTL": 24 * 3600,
    "REQUEST_TIMEOUT": 600.0,
    "SSE_RETRY_MS": 1000,
    "STREAM_HOLD_SECONDS": 25.0,
    "POLL_INTERVAL": 0.1,
    "REQUEST_STATE_TTL": 600.0,
    "HEARTBEAT_INTERVAL": 10.0,
    "WAIT_DETACH_SECONDS": 0.25,
    "WAIT_RETRY_MS": 1000,
    "BLOCKING_HOLD_SECONDS": 0.5,
    "DB_THREADS": 8,
    "JSON_RESPONSE": False,
    "ASYNC_VIEW": None,
    "AUTHENTICATION_CLASSES": [],
    "SQLITE_CHECKPOINT_INTERVAL": 0.2,
}


class MCPSettings:
    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None

    @property
    def user_settings(self) -> dict[str, Any]:
        return dict(getattr(settings, "MCP", None) or {})

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Invalid MCP setting: {name!r}")
        if self._cache is None:
            self._cache = {**DEFAULTS, **self.user_settings}
        return self._cache[name]

    def reload(self) -> None:
        self._cache = None
        self._config = None
        self._authenticators = None

    @property
    def authenticators(self) -> tuple[Any, ...]:
        """``AUTHENTICATION_CLASSES``, instantiated once (and again after a settings change)."""
        found = getattr(self, "_authenticators", None)
        if found is None:
            from mcp_django.auth import load_authenticators

            found = self._authenticators = load_authenticators(self.AUTHENTICATION_CLASSES)
        return found

    @property
    def config(self) -> MCPConfig:
        """:meth:`build_config`, built once (and again after a settings change)."""
        config = getattr(self, "_config", None)
        if config is None:
            config = self._config = self.build_config()
        return config

    def build_config(self) -> MCPConfig:
        allowed_hosts = tuple(settings.ALLOWED_HOSTS)
        if settings.DEBUG and not allowed_hosts:
            # Django's own rule: with DEBUG and no ALLOWED_HOSTS, loopback names are allowed.
            allowed_hosts = ("localhost", "127.0.0.1", "[::1]", ".localhost")
        return MCPConfig(
            allowed_hosts=allowed_hosts,
            allowed_origins=tuple(self.ALLOWED_ORIGINS),
            hosts_setting="ALLOWED_HOSTS",
            origins_setting='MCP["ALLOWED_ORIGINS"]',
            max_body_size=int(self.MAX_BODY_SIZE),
            secret_keys=secret_chain(settings.SECRET_KEY, getattr(settings, "SECRET_KEY_FALLBACKS", ())),
            session_ttl=float(self.SESSION_TTL),
            request_timeout=float(self.REQUEST_TIMEOUT),
            sse_retry_ms=int(self.SSE_RETRY_MS),
            stream_hold_seconds=float(self.STREAM_HOLD_SECONDS),
            poll_interval=float(self.POLL_INTERVAL),
            request_state_ttl=float(self.REQUEST_STATE_TTL),
            heartbeat_interval=float(self.HEARTBEAT_INTERVAL),
            wait_detach_seconds=float(self.WAIT_DETACH_SECONDS),
            wait_retry_ms=int(self.WAIT_RETRY_MS),
            blocking_hold_seconds=float(self.BLOCKING_HOLD_SECONDS),
            db_threads=int(self.DB_THREADS),
            json_response=bool(self.JSON_RESPONSE),
            sqlite_checkpoint_interval=float(self.SQLITE_CHECKPOINT_INTERVAL),
        )


mcp_settings = MCPSettings()


@receiver(setting_changed)
def _reload(*, setting: str, **_: Any) -> None:
    if setting in ("ALLOWED_HOSTS", "DEBUG", "USE_X_FORWARDED_HOST"):
        from mcp_django.middleware import forget_host_verdicts

        forget_host_verdicts()
    if setting in ("MCP", "ALLOWED_HOSTS", "SECRET_KEY", "SECRET_KEY_FALLBACKS", "DEBUG"):
        mcp_settings.reload()
        from mcp_django.registry import reset_endpoints

        reset_endpoints()
