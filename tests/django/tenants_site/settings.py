"""Settings of the django-tenants project (see the package's docstring)."""

from __future__ import annotations

import os

from example_project.settings_common import parse_database_url

SECRET_KEY = "tenants-test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"
DEBUG = False
ALLOWED_HOSTS = ["localhost", ".localhost", "127.0.0.1"]
PLACE = os.environ.get("MCP_TENANTS_PLACE", "shared")

SHARED_APPS = [
    "django_tenants",
    "tests.django.tenants_site.customers",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
]
TENANT_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
]
(SHARED_APPS if PLACE == "shared" else TENANT_APPS).append("mcp_django")
INSTALLED_APPS = [*SHARED_APPS, *(app for app in TENANT_APPS if app not in SHARED_APPS)]
TENANT_MODEL = "customers.Customer"
TENANT_DOMAIN_MODEL = "customers.Domain"

MIDDLEWARE = [
    # As the README says: a foreign Host gets MCP's JSON-RPC error, not django-tenants' HTML 404.
    "mcp_django.middleware.MCPMiddleware",
    "django_tenants.middleware.main.TenantMainMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.django.tenants_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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
_db = parse_database_url(os.environ["MCP_TENANTS_DATABASE_URL"])
DATABASES = {
    "default": {
        "ENGINE": "django_tenants.postgresql_backend",
        "NAME": _db["name"],
        "USER": _db["user"],
        "PASSWORD": _db["password"],
        "HOST": _db["host"],
        "PORT": _db["port"],
    }
}
DATABASE_ROUTERS = ["django_tenants.routers.TenantSyncRouter"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
MCP = {
    "SERVER": "example_project.servers.bistro.mcp",
    "HEARTBEAT_INTERVAL": float(os.environ.get("MCP_TENANTS_HEARTBEAT", "10")),
    "REQUEST_TIMEOUT": float(os.environ.get("MCP_TENANTS_REQUEST_TIMEOUT", "600")),
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
