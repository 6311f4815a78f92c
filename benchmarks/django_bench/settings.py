"""Minimal production-like settings: no debug, one middleware, SQLite in a temporary folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

DATA_DIR = Path(os.environ.get("BENCH_DATA_DIR") or tempfile.gettempdir())
# MCP["SQLITE_CHECKPOINT_INTERVAL"] (unset: MCP's default), 0 to compare with SQLite's
# checkpoints in commits.
CHECKPOINT_INTERVAL = os.environ.get("BENCH_SQLITE_CHECKPOINT_INTERVAL")
CHECKPOINTS_OFF = CHECKPOINT_INTERVAL is not None and float(CHECKPOINT_INTERVAL) == 0

SECRET_KEY = "benchmark-secret-key-not-for-production-0123456789-abcdefghijklmnopqrstuvwxyz"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
ROOT_URLCONF = "benchmarks.django_bench.urls"
WSGI_APPLICATION = "benchmarks.django_bench.wsgi.application"
if os.environ.get("BENCH_DJANGO_ASYNC") == "1":
    ASGI_APPLICATION = "benchmarks.django_bench.asgi.application"

INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "mcp_django"]
MIDDLEWARE = ["mcp_django.middleware.MCPMiddleware"]
TEMPLATES: list[dict[str, object]] = []

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(DATA_DIR / "django-bench.sqlite3"),
        # Persistent connections, as a production deployment configures them.
        "CONN_MAX_AGE": 600,
        # Several worker processes write to one file: wait for the lock instead of failing.
        "OPTIONS": {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            # WAL: readers never wait for the writer, and a commit is an append, not a journal
            # file created, synced and deleted (the SQLite setting Django's docs recommend).
            # With MCP's checkpoint thread on (the default), commits leave checkpoints to it
            # (README: "SQLite's checkpoints").
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
            + ("" if CHECKPOINTS_OFF else " PRAGMA wal_autocheckpoint=10000;"),
        },
    }
}
if os.environ.get("BENCH_POSTGRES_DB"):
    # ``--database postgres``: the machine's PostgreSQL server, a database of this target's own.
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["BENCH_POSTGRES_DB"],
        "HOST": os.environ.get("BENCH_POSTGRES_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_POSTGRES_PORT", "5432"),
        "USER": os.environ.get("BENCH_POSTGRES_USER", "postgres"),
        "CONN_MAX_AGE": 600,
    }

USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

MCP = {
    "SERVER": "benchmarks.bench_server.mcp",
    # A stalled elicitation (see README: gthread threads) frees its thread after this long.
    "REQUEST_TIMEOUT": float(os.environ.get("BENCH_REQUEST_TIMEOUT", "10")),
    "WAIT_DETACH_SECONDS": float(os.environ.get("BENCH_WAIT_DETACH", "0.25")),
}
if CHECKPOINT_INTERVAL is not None:
    MCP["SQLITE_CHECKPOINT_INTERVAL"] = float(CHECKPOINT_INTERVAL)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "mcp_common": {"handlers": ["console"], "level": "WARNING"},
        "mcp_django": {"handlers": ["console"], "level": "WARNING"},
    },
}
