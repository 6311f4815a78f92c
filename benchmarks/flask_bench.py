"""The Flask app under test: the bench server at ``/mcp``, a plain JSON route at ``/bare``.

``gunicorn 'benchmarks.flask_bench:create_app()'``; tables first with ``python -m benchmarks.flask_bench``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from flask import Flask, request

from benchmarks.bench_server import mcp
from mcp_flask import MCP
from mcp_flask import migrate as migrate_tables

SECRET_KEY = "benchmark-secret-key-not-for-production-0123456789-abcdefghijklmnopqrstuvwxyz"
BARE_RESULT = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {"content": [{"type": "text", "text": "echo: hi"}], "isError": False},
}


def bare() -> dict[str, object]:
    """What a Flask route costs without MCP: the body is read, a fixed JSON-RPC result sent."""
    request.get_data()
    return BARE_RESULT


def _database_uri(data_dir: Path) -> str:
    name = os.environ.get("BENCH_POSTGRES_DB")
    if not name:
        return f"sqlite:///{data_dir / 'flask-bench.sqlite3'}"
    # ``--database postgres``: the machine's PostgreSQL server, a database of this target's own.
    host = os.environ.get("BENCH_POSTGRES_HOST", "127.0.0.1")
    port = os.environ.get("BENCH_POSTGRES_PORT", "5432")
    user = os.environ.get("BENCH_POSTGRES_USER", "postgres")
    return f"postgresql+psycopg://{user}@{host}:{port}/{name}"


def create_app() -> Flask:
    data_dir = Path(os.environ.get("BENCH_DATA_DIR") or tempfile.gettempdir())
    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=SECRET_KEY,
        MCP_DATABASE_URI=_database_uri(data_dir),
        # A stalled elicitation (see README: gthread threads) frees its thread after this long.
        MCP_REQUEST_TIMEOUT=float(os.environ.get("BENCH_REQUEST_TIMEOUT", "10")),
        MCP_WAIT_DETACH_SECONDS=float(os.environ.get("BENCH_WAIT_DETACH", "0.25")),
    )
    if os.environ.get("BENCH_SQLITE_CHECKPOINT_INTERVAL"):  # 0: SQLite's checkpoints in commits
        app.config["MCP_SQLITE_CHECKPOINT_INTERVAL"] = float(os.environ["BENCH_SQLITE_CHECKPOINT_INTERVAL"])
    for name in ("mcp_common", "mcp_flask"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler())
    MCP(app, server=mcp)
    app.add_url_rule("/bare", "bare", bare, methods=["POST"])
    return app


if __name__ == "__main__":
    migrate_tables(create_app())
