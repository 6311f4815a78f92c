"""``MCP_*`` configuration keys, read once by :meth:`mcp_flask.MCP.init_app`.

=========================== =============================================================
``MCP_ALLOWED_HOSTS``       Host header values accepted (DNS-rebinding protection), with
                            Django's ``ALLOWED_HOSTS`` syntax (``.example.com``, ``*``) plus
                            ``host:*``. Default: the loopback names.
``MCP_ALLOWED_ORIGINS``     Origin header values accepted besides same-origin requests.
                            Default: none.
``MCP_MAX_BODY_SIZE``       Largest request body, in bytes (larger: HTTP 413). Default 4 MiB.
``MCP_SESSION_TTL``         Seconds a legacy session may stay idle. Default 86400.
``MCP_REQUEST_TIMEOUT``     Seconds a tool waits for the client's answer to a server-to-client
                            request (an unanswered elicitation ends as ``cancel``). Default 600.
``MCP_SSE_RETRY_MS``        The ``retry:`` hint of priming events, in ms. Default 1000.
``MCP_STREAM_HOLD_SECONDS`` How long an idle SSE stream is held open before the server closes
                            it (the client resumes with ``Last-Event-ID``). Default 25.
``MCP_POLL_INTERVAL``       Seconds between database polls for answers and events that may
                            come from another process. Default 0.1.
``MCP_REQUEST_STATE_TTL``   Seconds a 2026-07-28 ``requestState`` (and the elicitations its
                            round asked) stays valid. Default 600.
``MCP_HEARTBEAT_INTERVAL``  Seconds between a worker's heartbeats (a legacy call whose worker
                            stopped beating ends with an error on resume). Default 10.
``MCP_WAIT_DETACH_SECONDS`` Under WSGI, a call waiting this long for the client's answer ends
                            its SSE response (the client resumes from the event log), so no
                            worker thread waits on a human. Default 0.25.
``MCP_WAIT_RETRY_MS``       The ``retry:`` hint sent then, in ms. Default 1000.
``MCP_BLOCKING_HOLD_SECONDS`` How long a GET or resumed call stream is held under WSGI. Default 0.5.
``MCP_DB_THREADS``          Database threads (each with its connection) per MCP URL and process,
                            for the store's queries no request's thread takes. Default 8.
``MCP_JSON_RESPONSE``       Answer with JSON only, never SSE. Default ``False``.
``MCP_SQLITE_CHECKPOINT_INTERVAL`` On a SQLite file in WAL mode, a background thread per process
                            checkpoints the log after the store's writes, at most once per this
                            many seconds, instead of a request's commit doing it. ``0``: leave it
                            to SQLite. Default 0.2.
``MCP_DATABASE_URI``        Where sessions, events and pending requests live. Default: the
                            app's ``SQLALCHEMY_DATABASE_URI`` when Flask-SQLAlchemy is set up,
                            else ``sqlite:///<instance_path>/mcp.sqlite3``.
``MCP_ENGINE_OPTIONS``      Extra :func:`sqlalchemy.create_engine` arguments. Default: a copy of
                            ``SQLALCHEMY_ENGINE_OPTIONS`` when ``MCP_DATABASE_URI`` defaults to
                            Flask-SQLAlchemy's database, else ``{}``.
=========================== =============================================================

A duration in seconds is at most ten years; ``Infinity`` is refused.

Request-state keys derive from ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS``: every worker
must share them.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from flask import Flask
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from mcp_common.config import MCPConfig, secret_chain

logger = logging.getLogger("mcp_flask")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

DEFAULTS: dict[str, Any] = {
    "MCP_ALLOWED_HOSTS": LOOPBACK_HOSTS,
    "MCP_ALLOWED_ORIGINS": (),
    "MCP_MAX_BODY_SIZE": 4 * 1024 * 1024,
    "MCP_SESSION_TTL": 24 * 3600,
    "MCP_REQUEST_TIMEOUT": 600.0,
    "MCP_SSE_RETRY_MS": 1000,
    "MCP_STREAM_HOLD_SECONDS": 25.0,
    "MCP_POLL_INTERVAL": 0.1,
    "MCP_REQUEST_STATE_TTL": 600.0,
    "MCP_HEARTBEAT_INTERVAL": 10.0,
    "MCP_WAIT_DETACH_SECONDS": 0.25,
    "MCP_WAIT_RETRY_MS": 1000,
    "MCP_DB_THREADS": 8,
    "MCP_BLOCKING_HOLD_SECONDS": 0.5,
    "MCP_JSON_RESPONSE": False,
    "MCP_SQLITE_CHECKPOINT_INTERVAL": 0.2,
    "MCP_DATABASE_URI": None,
    "MCP_ENGINE_OPTIONS": {},
}
"""Every ``MCP_*`` key and its default (``MCP_DATABASE_URI``'s is computed per app)."""


def apply_defaults(app: Flask, *, uses_flask_sqlalchemy: bool) -> None:
    """``setdefault`` every key, so ``app.config`` shows the values in force."""
    _warn_of_unknown_keys(app)
    # The app's own database is reached as the app reaches it (a password, TLS settings or a
    # search path in ``connect_args``), unless MCP's URI or options are given.
    borrow_options = (
        app.config.get("MCP_DATABASE_URI") is None
        and "MCP_ENGINE_OPTIONS" not in app.config
        and uses_flask_sqlalchemy
        and bool(app.config.get("SQLALCHEMY_DATABASE_URI"))
    )
    if borrow_options:
        options = app.config.get("SQLALCHEMY_ENGINE_OPTIONS") or {}
        if not isinstance(options, Mapping):
            raise ValueError(f"SQLALCHEMY_ENGINE_OPTIONS must be a dict, got {options!r}.")
        app.config["MCP_ENGINE_OPTIONS"] = dict(options)
    for key, value in DEFAULTS.items():
        # Copies: a default mutated through one app's config must not leak into another's.
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, dict):
            value = dict(value)
        app.config.setdefault(key, value)
    if app.config["MCP_DATABASE_URI"] is None:
        app.config["MCP_DATABASE_URI"] = default_database_uri(app, uses_flask_sqlalchemy)
    if not isinstance(app.config["MCP_ENGINE_OPTIONS"], Mapping):
        raise ValueError(f"MCP_ENGINE_OPTIONS must be a dict, got {app.config['MCP_ENGINE_OPTIONS']!r}.")


def _warn_of_unknown_keys(app: Flask) -> None:
    """A mistyped key would leave its default in force without a word (Django's E001 refuses
    one). Logged, not raised: the app may keep keys of its own under the prefix."""
    unknown = sorted(key for key in app.config if key.startswith("MCP_") and key not in DEFAULTS)
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, DEFAULTS, n=1)
        named.append(f"{key} (did you mean {close[0]}?)" if close else key)
    logger.warning(
        "Unknown MCP setting(s), ignored: %s. Valid keys: %s.", ", ".join(named), ", ".join(sorted(DEFAULTS))
    )


def default_database_uri(app: Flask, uses_flask_sqlalchemy: bool) -> str:
    """The application's own database when Flask-SQLAlchemy is set up, else a SQLite file in
    the instance folder."""
    uri = app.config.get("SQLALCHEMY_DATABASE_URI") if uses_flask_sqlalchemy else None
    if uri:
        url = make_url(uri)
        database = url.database or ""
        if url.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not os.path.isabs(database):
            # Flask-SQLAlchemy's rule: a relative SQLite path is relative to the instance folder.
            url = url.set(database=os.path.join(app.instance_path, database))
        return url.render_as_string(hide_password=False)
    os.makedirs(app.instance_path, exist_ok=True)
    return f"sqlite:///{os.path.join(app.instance_path, 'mcp.sqlite3')}"


MAX_SECONDS = 10 * 365 * 24 * 3600
"""The longest duration a key takes: ten years. A longer one (``Infinity`` or ``1e12`` from
``from_prefixed_env``) puts an expiry past the year 9999 (every resolver call fails), a purge
cut-off before year 1, or a stream held forever."""


def _number(config: Mapping[str, Any], key: str, unit: str, *, zero: bool = False) -> float:
    value = config[key]
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not (value >= 0 if zero else value > 0)
        or not value <= MAX_SECONDS
    ):
        raise ValueError(
            f"{key} must be a {'non-negative' if zero else 'positive'} number of {unit} "
            f"(at most {MAX_SECONDS}, ten years), got {value!r}."
        )
    return float(value)


def _integer(config: Mapping[str, Any], key: str, unit: str, minimum: int) -> int:
    value = config[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "a positive" if minimum > 0 else "a non-negative"
        raise ValueError(f"{key} must be {kind} integer number of {unit}, got {value!r}.")
    return value


def _strings(config: Mapping[str, Any], key: str, example: str) -> tuple[str, ...]:
    value = config[key]
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of strings, such as [{example!r}], got {value!r}.")
    return tuple(value)


def _secret(value: Any, key: str) -> str:
    if isinstance(value, bytes):
        # Any fixed mapping will do: the key only has to be the same in every worker.
        return value.decode("latin-1")
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {type(value).__name__}.")
    return value


_WEAK_KEYS_SAID: set[bytes] = set()
"""Digests of the weak keys already warned about in this process (never the keys)."""


def _warn_weak_key(key: str) -> None:
    # Once per key and process: a module that builds ``app = create_app()`` at import, with the
    # CLI pointed at the factory, builds two apps from one configuration, and tests build many.
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    if digest not in _WEAK_KEYS_SAID:
        _WEAK_KEYS_SAID.add(digest)
        logger.warning("SECRET_KEY is shorter than 32 characters; MCP request-state keys derived from it are weak.")


def build_config(app: Flask) -> MCPConfig:
    """The frozen core configuration for ``app``; a ``ValueError`` names any bad option."""
    config = app.config
    secret = config.get("SECRET_KEY")
    if not secret:
        raise ValueError(
            "SECRET_KEY is not set. MCP derives its request-state keys from it, and every worker "
            "must share them: set app.config['SECRET_KEY'] before calling MCP.init_app()."
        )
    fallbacks = config.get("SECRET_KEY_FALLBACKS") or []
    if isinstance(fallbacks, str | bytes) or not isinstance(fallbacks, Sequence):
        raise ValueError(f"SECRET_KEY_FALLBACKS must be a list of keys, got {fallbacks!r}.")
    secrets = secret_chain(_secret(secret, "SECRET_KEY"), [_secret(f, "SECRET_KEY_FALLBACKS") for f in fallbacks])
    if len(secrets[0]) < 32:
        _warn_weak_key(secrets[0])
    json_response = config["MCP_JSON_RESPONSE"]
    if not isinstance(json_response, bool):
        raise ValueError(f"MCP_JSON_RESPONSE must be True or False, got {json_response!r}.")
    uri = config["MCP_DATABASE_URI"]
    try:
        make_url(uri)
    except (ArgumentError, TypeError, ValueError) as exc:
        raise ValueError(f"MCP_DATABASE_URI is not a database URL: {uri!r} ({exc}).") from None
    return MCPConfig(
        allowed_hosts=_strings(config, "MCP_ALLOWED_HOSTS", "example.com"),
        allowed_origins=_strings(config, "MCP_ALLOWED_ORIGINS", "https://example.com"),
        hosts_setting="MCP_ALLOWED_HOSTS",
        origins_setting="MCP_ALLOWED_ORIGINS",
        max_body_size=_integer(config, "MCP_MAX_BODY_SIZE", "bytes", 1),
        secret_keys=secrets,
        session_ttl=_number(config, "MCP_SESSION_TTL", "seconds"),
        request_timeout=_number(config, "MCP_REQUEST_TIMEOUT", "seconds"),
        sse_retry_ms=_integer(config, "MCP_SSE_RETRY_MS", "milliseconds", 0),
        stream_hold_seconds=_number(config, "MCP_STREAM_HOLD_SECONDS", "seconds"),
        poll_interval=_number(config, "MCP_POLL_INTERVAL", "seconds"),
        request_state_ttl=_number(config, "MCP_REQUEST_STATE_TTL", "seconds"),
        heartbeat_interval=_number(config, "MCP_HEARTBEAT_INTERVAL", "seconds"),
        db_threads=_integer(config, "MCP_DB_THREADS", "threads", 1),
        wait_detach_seconds=_number(config, "MCP_WAIT_DETACH_SECONDS", "seconds", zero=True),
        wait_retry_ms=_integer(config, "MCP_WAIT_RETRY_MS", "milliseconds", 0),
        blocking_hold_seconds=_number(config, "MCP_BLOCKING_HOLD_SECONDS", "seconds"),
        json_response=json_response,
        sqlite_checkpoint_interval=_number(config, "MCP_SQLITE_CHECKPOINT_INTERVAL", "seconds", zero=True),
    )
