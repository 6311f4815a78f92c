"""Settings both example apps share: where the database is, which servers are served where."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

DATA_DIR = Path(os.environ.get("MCP_EXAMPLE_DATA_DIR", Path(__file__).resolve().parent.parent / ".data"))

# Development only: a real deployment sets MCP_EXAMPLE_SECRET_KEY (and keeps it secret).
SECRET_KEY = os.environ.get("MCP_EXAMPLE_SECRET_KEY", "example-project-insecure-key-change-me-0123456789abcdef")

SERVERS = {
    "": "example_project.servers.demo.mcp",
    "/conformance": "example_project.servers.conformance.mcp",
    "/files": "example_project.servers.files.mcp",
    "/bistro": "example_project.servers.bistro.mcp",
    "/library": "example_project.servers.library.mcp",
}
"""URL suffix under ``/mcp`` -> the server served there."""


def database_url() -> str:
    return os.environ.get("MCP_EXAMPLE_DATABASE_URL") or f"sqlite:///{DATA_DIR / 'example.sqlite3'}"


def parse_database_url(url: str) -> dict[str, str]:
    """``sqlite:///path``, ``postgresql://user:pass@host:port/name`` or
    ``mysql://user:pass@host:port/name`` (MySQL or MariaDB) as parts."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme == "sqlite":
        return {"engine": "sqlite", "name": unquote(parts.path) if parts.path not in ("", "/") else ":memory:"}
    engines = {"postgres": "postgresql", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}
    if scheme in engines:
        return {
            "engine": engines[scheme],
            "name": unquote(parts.path.lstrip("/")),
            "user": unquote(parts.username or ""),
            "password": unquote(parts.password or ""),
            "host": parts.hostname or "",
            "port": str(parts.port or ""),
        }
    raise ValueError(f"Unsupported database URL {url!r}: use sqlite:///path, postgresql://... or mysql://...")
