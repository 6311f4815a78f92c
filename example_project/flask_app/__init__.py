"""The Flask example app: the same MCP servers as the Django site, at the same URLs.

``flask --app example_project.flask_app mcp migrate`` creates the tables, then
``flask --app example_project.flask_app run`` (or gunicorn ``example_project.flask_app.wsgi:app``).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Mapping
from html import escape
from typing import Any

from flask import Flask, Response
from werkzeug.middleware.proxy_fix import ProxyFix

from example_project.settings_common import DATA_DIR, SECRET_KEY, SERVERS, database_url, parse_database_url
from mcp_flask import MCP, get_state
from mcp_flask.admin import admin_blueprint


def _configure_logging() -> None:
    # One handler, the root logger's, which every record reaches once (unless the process set
    # its own up). The SDK's MCPServer() gives the root logger a handler unless it has one, so
    # a handler on a logger below it too printed each of that logger's records twice.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    level = os.environ.get("MCP_EXAMPLE_LOG_LEVEL", "WARNING")
    # The SDK's loggers too: a tool's crash is logged on "mcp.server.mcpserver.server".
    for name in ("mcp", "mcp_common", "mcp_flask"):
        logging.getLogger(name).setLevel(level)


def home() -> str:
    from flask import request, url_for

    # Under the script root, where a reverse proxy serves the app under a path of its own.
    links = "".join(f"<li><code>{escape(request.script_root + url)}</code></li>" for url in get_state().endpoints)
    return (
        "<!doctype html><title>MCP for Flask</title><h1>MCP for Flask: example app</h1>"
        f"<p>MCP endpoints (Streamable HTTP):</p><ul>{links}</ul>"
        f"<p><a href='{url_for('mcp_admin.index')}'>Review the questions tools asked</a> (from this machine only)</p>"
    )


def worker_header(response: Response) -> Response:
    """Test instrumentation (``MCP_EXAMPLE_WORKER_HEADER=1``): name the worker process that
    served each response, to prove a session survives its requests landing on different
    workers. Never in production: process ids are nobody's business."""
    response.headers["X-Example-Worker"] = str(os.getpid())
    return response


def payment_webhook() -> tuple[dict[str, Any], int]:
    """The payment provider reports a paid deposit: complete its URL-mode elicitation.

    ``{"elicitation_id": "deposit-17"}`` with ``Authorization: Bearer <PAYMENT_WEBHOOK_TOKEN>``.
    The MCP client that is waiting on it receives ``notifications/elicitation/complete``.
    """
    from flask import current_app, request

    from mcp_flask import complete_elicitation

    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    # As bytes: hmac.compare_digest raises on non-ASCII text, and the caller chose this one.
    if not hmac.compare_digest(token.encode(), current_app.config["PAYMENT_WEBHOOK_TOKEN"].encode()):
        return {"error": "unauthorized"}, 401
    try:
        payload = request.get_json(silent=True)
    except RecursionError:  # a body nested too deep: not the JSON expected, as silent=True answers
        payload = None
    elicitation_id = payload.get("elicitation_id") if isinstance(payload, dict) else None
    if not isinstance(elicitation_id, str) or not elicitation_id:
        return {"error": 'expected {"elicitation_id": "..."}'}, 400
    return {"completed": complete_elicitation(elicitation_id)}, 200


def local_staff_only() -> bool:
    """The demo's review-panel check: requests from this machine. A real app asks its own
    authentication instead (Flask-Login's ``current_user``, a role...)."""
    from flask import request

    return request.remote_addr in ("127.0.0.1", "::1")


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The example app; ``config`` overrides settings (tests use it).

    Tables are not created here: run ``flask mcp migrate`` or call ``MCP.migrate(app)``.
    """
    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=SECRET_KEY,
        MCP_DATABASE_URI=database_url(),
        MCP_STREAM_HOLD_SECONDS=float(os.environ.get("MCP_EXAMPLE_STREAM_HOLD", "25")),
        MCP_REQUEST_TIMEOUT=float(os.environ.get("MCP_EXAMPLE_REQUEST_TIMEOUT", "600")),
        MCP_REQUEST_STATE_TTL=float(os.environ.get("MCP_EXAMPLE_STATE_TTL", "600")),
        MCP_HEARTBEAT_INTERVAL=float(os.environ.get("MCP_EXAMPLE_HEARTBEAT", "10")),
        PAYMENT_WEBHOOK_TOKEN=os.environ.get("MCP_EXAMPLE_WEBHOOK_TOKEN", "demo-webhook-token"),
        # create_engine() options as JSON (the tests' pool limits).
        MCP_ENGINE_OPTIONS=json.loads(os.environ.get("MCP_EXAMPLE_ENGINE_OPTIONS") or "{}"),
    )
    public_host = os.environ.get("MCP_EXAMPLE_PUBLIC_HOST")
    if public_host:
        # Behind a reverse proxy that serves the app as https://<public_host>, under the path
        # prefix it sends as X-Forwarded-Prefix: werkzeug takes the client's address, the
        # scheme, the public name and the prefix from the proxy's headers (one proxy).
        app.config["MCP_ALLOWED_HOSTS"] = ["localhost", "127.0.0.1", "[::1]", public_host]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1, x_host=1, x_prefix=1)  # type: ignore[method-assign]
    app.config.update(config or {})
    if app.config["MCP_DATABASE_URI"] == database_url() and parse_database_url(database_url())["engine"] == "sqlite":
        DATA_DIR.mkdir(parents=True, exist_ok=True)
    _configure_logging()
    MCP(app, servers={f"/mcp{suffix}": server for suffix, server in SERVERS.items()})
    app.add_url_rule("/", "home", home)
    app.add_url_rule("/payments/webhook", "payment_webhook", payment_webhook, methods=["POST"])
    app.register_blueprint(admin_blueprint(local_staff_only), url_prefix="/mcp-admin")
    if os.environ.get("MCP_EXAMPLE_WORKER_HEADER") == "1":
        app.after_request(worker_header)
    return app
