"""Django settings of the example site (``python -m example_project serve --framework django``)."""

from __future__ import annotations

import json
import os

from example_project import settings_common
from example_project.settings_common import DATA_DIR, database_url, parse_database_url

SECRET_KEY = settings_common.SECRET_KEY

DEBUG = os.environ.get("MCP_EXAMPLE_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]
# Behind a reverse proxy that serves the site as https://<MCP_EXAMPLE_PUBLIC_HOST>: Django takes
# the public name and scheme from the proxy's X-Forwarded-Host and X-Forwarded-Proto (which the
# proxy must set itself, never pass on from the client), and the path prefix the proxy strips
# (MCP_EXAMPLE_SCRIPT_NAME, "/shop") as FORCE_SCRIPT_NAME.
PUBLIC_HOST = os.environ.get("MCP_EXAMPLE_PUBLIC_HOST")
if PUBLIC_HOST:
    ALLOWED_HOSTS.append(PUBLIC_HOST)
    USE_X_FORWARDED_HOST = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if os.environ.get("MCP_EXAMPLE_SCRIPT_NAME"):
    FORCE_SCRIPT_NAME = os.environ["MCP_EXAMPLE_SCRIPT_NAME"]
ROOT_URLCONF = "example_project.django_site.urls"
WSGI_APPLICATION = "example_project.django_site.wsgi.application"
if os.environ.get("MCP_EXAMPLE_ASGI") == "1":
    ASGI_APPLICATION = "example_project.django_site.asgi.application"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "mcp_django",
    "example_project.django_site.shop",
]
MIDDLEWARE = [
    "mcp_django.middleware.MCPMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # As startproject's: the admin's action marks deposits paid, and no other site may frame it.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
if os.environ.get("MCP_EXAMPLE_WORKER_HEADER") == "1":
    MIDDLEWARE.append("example_project.django_site.middleware.worker_header")
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

_db = parse_database_url(database_url())
if _db["engine"] == "sqlite":
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _db["name"],
            # Several worker processes write to one file: wait for the lock instead of failing.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                # WAL: readers never wait for the writer; a commit appends instead of syncing a
                # rollback journal (Django's recommended SQLite setup for concurrent use). MCP's
                # checkpoint thread copies the log back, so commits leave it to that thread.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=10000;",
            },
        }
    }
elif _db["engine"] == "mysql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": _db["name"],
            "USER": _db["user"],
            "PASSWORD": _db["password"],
            "HOST": _db["host"],
            "PORT": _db["port"],
            "CONN_MAX_AGE": 60,
            # Django's recommended setup: 4-byte UTF-8 (emoji in a question), strict mode.
            "OPTIONS": {"charset": "utf8mb4"},
            "TEST": {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _db["name"],
            "USER": _db["user"],
            "PASSWORD": _db["password"],
            "HOST": _db["host"],
            "PORT": _db["port"],
            "CONN_MAX_AGE": 60,
        }
    }
    if os.environ.get("MCP_EXAMPLE_DB_POOL"):
        # Django's psycopg connection pool (its options as JSON; the tests' pool setups): a
        # pooled connection goes back to the pool after each request instead of persisting.
        DATABASES["default"]["OPTIONS"] = {"pool": json.loads(os.environ["MCP_EXAMPLE_DB_POOL"])}
        DATABASES["default"]["CONN_MAX_AGE"] = 0
if os.environ.get("MCP_EXAMPLE_WORKER_CLASS") == "gevent":
    # Each request is a greenlet of its own, with its own connection: a persistent one would
    # never be reused, and would stay open until the greenlet is collected.
    DATABASES["default"]["CONN_MAX_AGE"] = 0

STATIC_URL = "static/"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

MCP = {
    "SERVER": "example_project.servers.demo.mcp",
    "STREAM_HOLD_SECONDS": float(os.environ.get("MCP_EXAMPLE_STREAM_HOLD", "25")),
    "REQUEST_TIMEOUT": float(os.environ.get("MCP_EXAMPLE_REQUEST_TIMEOUT", "600")),
    "REQUEST_STATE_TTL": float(os.environ.get("MCP_EXAMPLE_STATE_TTL", "600")),
    "HEARTBEAT_INTERVAL": float(os.environ.get("MCP_EXAMPLE_HEARTBEAT", "10")),
}

# Celery (optional): a payment provider's callback can be handed to a worker, which completes the
# URL-mode elicitation from there (mcp_django.tasks.complete_elicitation_task).
CELERY_BROKER_URL = os.environ.get("MCP_EXAMPLE_CELERY_BROKER", "redis://127.0.0.1:6379/0")
# Out of the box (no broker named) tasks run in place, eagerly: the site runs in one command,
# and a task queued where no worker reads would never run.
CELERY_TASK_ALWAYS_EAGER = not os.environ.get("MCP_EXAMPLE_CELERY_BROKER")
# Redis keeps results itself; with RabbitMQ (amqp://) set MCP_EXAMPLE_CELERY_BACKEND=rpc://.
CELERY_RESULT_BACKEND = os.environ.get("MCP_EXAMPLE_CELERY_BACKEND") or CELERY_BROKER_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# The demo payment provider's webhook shares this token with the site.
PAYMENT_WEBHOOK_TOKEN = os.environ.get("MCP_EXAMPLE_WEBHOOK_TOKEN", "demo-webhook-token")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    # One handler, the root logger's, which every record reaches once. The SDK's MCPServer()
    # gives the root logger a handler unless it has one, so a handler on a logger of its own
    # too (ours, or Django's DEBUG console on "django") printed each of its records twice.
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "django": {"level": "INFO"},  # its records go to the root's handler, once
        # The SDK's loggers too: a tool's crash is logged on "mcp.server.mcpserver.server".
        **{
            name: {"level": os.environ.get("MCP_EXAMPLE_LOG_LEVEL", "WARNING")}
            for name in ("mcp", "mcp_common", "mcp_django")
        },
    },
}
