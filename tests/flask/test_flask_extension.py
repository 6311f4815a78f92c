"""``MCP`` as a Flask extension: registration, configuration, routes, the view's translation."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from flask import Flask
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Elicit, ElicitationResult, Resolve
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from pydantic import BaseModel

import mcp_flask
from mcp_common.schemas import ElicitationSchemaError
from mcp_flask import MCP, get_state
from mcp_flask.conf import LOOPBACK_HOSTS
from mcp_flask.store import SQLITE_TIMEOUT

SSE_AND_JSON = "application/json, text/event-stream"

server = MCPServer("FlaskTests")
cancelled = threading.Event()


@server.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text


@server.tool()
async def wait_forever(ctx: Context) -> str:
    """Report progress, then wait until the client goes away."""
    import asyncio

    await ctx.report_progress(1, 2, "started")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.set()
        raise
    return "never"


# Elicitation models: the schema check reads tool sources, so they live at module level.


class Address(BaseModel):
    street: str
    city: str


class Person(BaseModel):
    name: str
    address: Address


class Edition(BaseModel):
    edition: str
    copies: int = 1


nested_server = MCPServer("NestedElicitation")
flat_server = MCPServer("FlatElicitation")


@nested_server.tool()
async def register(ctx: Context) -> str:
    """Ask for a person, with a nested address (not a valid elicitation schema)."""
    result = await ctx.elicit("x", schema=Person)
    return str(result)


@flat_server.tool()
async def borrow(ctx: Context) -> str:
    """Ask for a flat model: valid."""
    result = await ctx.elicit("Which edition?", schema=Edition)
    return str(result)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _initialize(client: Any, url: str = "/mcp", base_url: str | None = None, **headers: str) -> Any:
    extra = {} if base_url is None else {"base_url": base_url}
    return client.post(url, json=INITIALIZE, headers={"Accept": SSE_AND_JSON, **headers}, **extra)


# -- registration ------------------------------------------------------------------------------


def test_init_app_twice_raises(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    mcp = MCP(app, server=server)
    with pytest.raises(RuntimeError, match=r"already been registered.*add_server"):
        mcp.init_app(app)
    with pytest.raises(RuntimeError, match="already been registered"):
        MCP(app, server=server)


def test_one_instance_many_apps(make_app: Callable[..., Flask]) -> None:
    mcp = MCP(server=server)
    first, second = make_app(), make_app()
    mcp.init_app(first)
    mcp.init_app(second)
    assert mcp.endpoint(app=first) is not mcp.endpoint(app=second)
    assert get_state(first).endpoints["/mcp"].app is first


def test_servers_are_added_before_init_app(make_app: Callable[..., Flask]) -> None:
    with pytest.raises(RuntimeError, match="No MCP server"):
        MCP(make_app())
    mcp = MCP(make_app(), server=server)
    with pytest.raises(RuntimeError, match="before calling init_app"):
        mcp.add_server(server, "/mcp/more")


@pytest.mark.parametrize("url", ["mcp", "/mcp/", ""])
def test_bad_url(url: str) -> None:
    with pytest.raises(ValueError, match="starts with '/'"):
        MCP(server=server, url=url)


def test_duplicate_url_and_wrong_server_type() -> None:
    mcp = MCP(server=server)
    with pytest.raises(ValueError, match="already added"):
        mcp.add_server(server, "/mcp")
    with pytest.raises(TypeError, match="MCPServer"):
        mcp.add_server(object(), "/other")


def test_dotted_path_servers_resolve_at_init_app(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    mcp = MCP(servers={"/mcp": "example_project.servers.demo.mcp", "/mcp/files": "example_project.servers.files.mcp"})
    mcp.add_server("example_project.servers.library.mcp", "/tools/library", name="library")
    mcp.init_app(app)
    assert mcp.endpoint("/mcp/files", app).name == "Files"
    with app.test_request_context():
        from flask import url_for

        assert url_for("library") == "/tools/library"
        assert url_for("mcp_files") == "/mcp/files"
    with pytest.raises(ValueError, match="could not be imported"):
        MCP(make_app(), server="example_project.servers.nope.mcp")


def test_a_nested_elicitation_schema_fails_init_app(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    with pytest.raises(ElicitationSchemaError) as raised:
        MCP(app, server=nested_server)
    message = str(raised.value)
    assert (
        "Elicitation schema field 'address' rendered as {'$ref': '#/$defs/Address'}, which is not a valid "
        "PrimitiveSchemaDefinition" in message
    )
    assert "'/mcp'" in message and "'register'" in message
    assert isinstance(raised.value, TypeError)
    # Nothing was registered: the app has no MCP state, no route.
    assert "mcp" not in app.extensions
    assert not any(rule.rule == "/mcp" for rule in app.url_map.iter_rules())
    # Any one bad server fails the whole init_app, wherever it is served.
    with pytest.raises(ElicitationSchemaError, match="'/mcp/people'"):
        MCP(make_app(), servers={"/mcp": flat_server, "/mcp/people": nested_server})


def test_a_flat_elicitation_schema_passes_init_app(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    mcp = MCP(app, server=flat_server)
    assert mcp.endpoint(app=app).name == "FlatElicitation"


# -- configuration -----------------------------------------------------------------------------


def test_defaults_are_set_in_app_config(make_app: Callable[..., Flask]) -> None:
    app = make_app(SECRET_KEY_FALLBACKS=["old-secret-key-0123456789abcdef0123456789"])
    MCP(app, server=server)
    assert app.config["MCP_ALLOWED_HOSTS"] == list(LOOPBACK_HOSTS)
    assert app.config["MCP_STREAM_HOLD_SECONDS"] == 25.0
    config = get_state(app).config
    assert config.allowed_hosts == LOOPBACK_HOSTS
    assert config.max_body_size == 4 * 1024 * 1024
    assert config.json_response is False
    assert len(config.secret_keys) == 2 and config.secret_keys[0] == app.config["SECRET_KEY"]


def test_values_from_config(make_app: Callable[..., Flask]) -> None:
    app = make_app(
        MCP_ALLOWED_HOSTS=[".example.com"],
        MCP_ALLOWED_ORIGINS=["https://app.example.com"],
        MCP_MAX_BODY_SIZE=1000,
        MCP_SESSION_TTL=60,
        MCP_REQUEST_TIMEOUT=5,
        MCP_SSE_RETRY_MS=0,
        MCP_STREAM_HOLD_SECONDS=2,
        MCP_POLL_INTERVAL=0.5,
        MCP_JSON_RESPONSE=True,
        MCP_DB_THREADS=3,
    )
    MCP(app, server=server)
    config = get_state(app).config
    assert config.db_threads == 3
    assert config.allowed_hosts == (".example.com",)
    assert config.allowed_origins == ("https://app.example.com",)
    assert (config.max_body_size, config.session_ttl, config.request_timeout) == (1000, 60.0, 5.0)
    assert (config.sse_retry_ms, config.stream_hold_seconds, config.poll_interval) == (0, 2.0, 0.5)
    assert config.json_response is True


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MCP_SESSION_TTL", 0),
        ("MCP_REQUEST_TIMEOUT", -1),
        # Not durations: each is refused at start-up, not at the first resolver call (a request
        # state's expiry past year 9999), at `flask mcp purge` or never (a stream held forever).
        ("MCP_REQUEST_STATE_TTL", float("inf")),
        ("MCP_REQUEST_STATE_TTL", 1e12),
        ("MCP_SESSION_TTL", 1e11),
        ("MCP_STREAM_HOLD_SECONDS", float("inf")),
        ("MCP_WAIT_DETACH_SECONDS", float("inf")),
        ("MCP_SQLITE_CHECKPOINT_INTERVAL", -0.05),
        ("MCP_SQLITE_CHECKPOINT_INTERVAL", float("nan")),
        ("MCP_SQLITE_CHECKPOINT_INTERVAL", "0.05"),
        ("MCP_POLL_INTERVAL", float("inf")),
        ("MCP_STREAM_HOLD_SECONDS", "25"),
        ("MCP_POLL_INTERVAL", True),
        ("MCP_MAX_BODY_SIZE", 1.5),
        ("MCP_SSE_RETRY_MS", -1),
        ("MCP_DB_THREADS", 0),
        ("MCP_DB_THREADS", 2.5),
        ("MCP_ALLOWED_HOSTS", "example.com"),
        ("MCP_ALLOWED_ORIGINS", [1]),
        ("MCP_JSON_RESPONSE", "yes"),
        ("MCP_DATABASE_URI", "not a database url"),
        ("MCP_ENGINE_OPTIONS", ["pool_size", 5]),
        ("SECRET_KEY_FALLBACKS", "old-key"),
    ],
)
def test_bad_values_name_the_option(make_app: Callable[..., Flask], key: str, value: Any) -> None:
    app = make_app(**{key: value})
    with pytest.raises(ValueError, match=key):
        MCP(app, server=server)
    assert "mcp" not in app.extensions


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MCP_ENGINE_OPTIONS", {"pool_size": "5"}),
        ("MCP_ENGINE_OPTIONS", {"pool_sise": 5}),
        ("MCP_DATABASE_URI", "postgresql+nodriver://db.example/shop"),
        ("MCP_DATABASE_URI", "nosuchdatabase://db.example/shop"),
    ],
)
def test_options_create_engine_refuses_name_the_key(make_app: Callable[..., Flask], key: str, value: Any) -> None:
    """SQLAlchemy's own errors (a TypeError with no key in it, "Can't load plugin") name the key
    that caused them, as every other bad value does, even when it came from the environment."""
    app = make_app(**{"MCP_DATABASE_URI": "postgresql://db.example/shop", key: value})
    with pytest.raises(ValueError, match=key):
        MCP(app, server=server)
    assert "mcp" not in app.extensions


def test_secret_key_is_required(make_app: Callable[..., Flask]) -> None:
    app = make_app(SECRET_KEY=None)
    with pytest.raises(ValueError, match="SECRET_KEY is not set"):
        MCP(app, server=server)


def test_default_database_is_in_the_instance_folder(tmp_path: Path) -> None:
    app = Flask("defaults", instance_path=str(tmp_path / "instance"))
    app.config["SECRET_KEY"] = "x" * 40
    MCP(app, server=server)
    assert app.config["MCP_DATABASE_URI"] == f"sqlite:///{tmp_path / 'instance' / 'mcp.sqlite3'}"
    assert (tmp_path / "instance").is_dir()


def test_default_database_is_flask_sqlalchemys(tmp_path: Path) -> None:
    from flask_sqlalchemy import SQLAlchemy

    app = Flask("with_db", instance_path=str(tmp_path / "instance"))
    app.config.update(SECRET_KEY="x" * 40, SQLALCHEMY_DATABASE_URI="sqlite:///app.db")
    db = SQLAlchemy(app)
    MCP(app, server=server, db=db)
    # Flask-SQLAlchemy's rule for a relative SQLite path: the instance folder. Same file.
    with app.app_context():
        assert str(db.engine.url) == app.config["MCP_DATABASE_URI"]
        # Its own engine: the store runs on threads that have no application context.
        assert get_state(app).engine is not db.engine


@pytest.mark.postgres
def test_the_default_database_is_reached_with_flask_sqlalchemys_engine_options(tmp_path: Path) -> None:
    """A database reached with ``SQLALCHEMY_ENGINE_OPTIONS`` (its password, TLS settings or
    search path in ``connect_args``) is reached the same way by the MCP tables that default to
    it: without them the MCP engine could not log in, or wrote to another schema."""
    from flask_sqlalchemy import SQLAlchemy
    from sqlalchemy import text

    def app_with(**config: Any) -> Flask:
        app = Flask("with_db", instance_path=str(tmp_path / "instance"))
        app.config.update(
            SECRET_KEY="x" * 40,
            SQLALCHEMY_DATABASE_URI="postgresql+psycopg://postgres@127.0.0.1:5432/test",
            SQLALCHEMY_ENGINE_OPTIONS={"connect_args": {"application_name": "shop-web"}, "pool_size": 3},
            **config,
        )
        MCP(app, server=server, db=SQLAlchemy(app))
        return app

    def application_name(app: Flask) -> str:
        with get_state(app).engine.connect() as connection:
            return str(connection.execute(text("SHOW application_name")).scalar())

    app = app_with()
    assert application_name(app) == "shop-web"
    assert get_state(app).engine.pool.size() == 3
    # Borrowed as a copy: changing one app's options changes nothing else.
    assert app.config["MCP_ENGINE_OPTIONS"] == app.config["SQLALCHEMY_ENGINE_OPTIONS"]
    assert app.config["MCP_ENGINE_OPTIONS"] is not app.config["SQLALCHEMY_ENGINE_OPTIONS"]
    get_state(app).close()
    # Options of its own (even none) win; so does a database of its own.
    app = app_with(MCP_ENGINE_OPTIONS={})
    assert application_name(app) != "shop-web"
    get_state(app).close()
    app = app_with(MCP_DATABASE_URI="postgresql://postgres@127.0.0.1:5432/test")
    assert app.config["MCP_ENGINE_OPTIONS"] == {}
    get_state(app).close()


def _refused_at_once_then_committed(db: Any) -> None:
    """``complete_elicitation`` refuses, without waiting for SQLite's lock, while ``db.session``
    holds a write to the MCP file; then the session commits."""
    import time

    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"db\.session\.commit\(\)"):
        mcp_flask.complete_elicitation("deposit-1")
    assert time.monotonic() - started < SQLITE_TIMEOUT / 2  # not SQLite's lock wait (20 s)
    db.session.commit()


def test_completing_between_a_flush_and_the_commit_on_a_shared_sqlite_file_says_commit_first(
    tmp_path: Path,
) -> None:
    """A payment webhook marks its order paid (``db.session.flush()``) and completes the
    question before it commits: on SQLite, whose file has one writer, the app's own open write
    would make the completion wait 20 s and fail with "database is locked". It is refused at
    once, saying what to do; after the commit it goes through."""
    from flask_sqlalchemy import SQLAlchemy

    app = Flask("webhook", instance_path=str(tmp_path / "instance"))
    app.config.update(SECRET_KEY="x" * 40, SQLALCHEMY_DATABASE_URI="sqlite:///app.db")
    db = SQLAlchemy(app)

    class Order(db.Model):  # type: ignore[name-defined,misc]
        id = db.Column(db.Integer, primary_key=True)
        paid = db.Column(db.Integer, default=0)

    MCP(app, server=server, db=db)
    MCP.migrate(app)
    with app.app_context():
        db.create_all()
        db.session.add(Order(id=1))
        db.session.commit()
        db.session.get(Order, 1).paid = 1
        db.session.flush()
        _refused_at_once_then_committed(db)
        assert mcp_flask.complete_elicitation("deposit-1") == 0  # nothing asked under it: no wait
        # Only reads in the session's transaction: nothing to wait for.
        assert db.session.get(Order, 1).paid == 1
        assert mcp_flask.complete_elicitation("deposit-1") == 0
        db.session.remove()
    get_state(app).close()


def test_completing_with_an_uncommitted_write_to_a_bind_in_the_mcp_sqlite_file_says_commit_first(
    tmp_path: Path,
) -> None:
    """The app's models on ``SQLALCHEMY_BINDS`` (no default database at all), the MCP tables in
    the file of one of them: the webhook's flushed write to that bind is seen, and refused at
    once, as a write to the default database is (it was missed: the completion waited 20 s and
    failed with "database is locked"; an app with binds only crashed on its first flush)."""
    from flask_sqlalchemy import SQLAlchemy

    shared = f"sqlite:///{tmp_path / 'orders.db'}"
    app = Flask("binds", instance_path=str(tmp_path / "instance"))
    app.config.update(
        SECRET_KEY="x" * 40,
        SQLALCHEMY_BINDS={"orders": shared, "users": f"sqlite:///{tmp_path / 'users.db'}"},
        MCP_DATABASE_URI=shared,
    )
    db = SQLAlchemy(app)

    class Order(db.Model):  # type: ignore[name-defined,misc]
        __bind_key__ = "orders"
        id = db.Column(db.Integer, primary_key=True)

    class Member(db.Model):  # type: ignore[name-defined,misc]
        __bind_key__ = "users"
        id = db.Column(db.Integer, primary_key=True)

    MCP(app, server=server, db=db)
    MCP.migrate(app)
    with app.app_context():
        db.create_all(bind_key=["orders", "users"])
        db.session.add(Member(id=1))
        db.session.flush()  # another file's write: nothing to wait for
        assert mcp_flask.complete_elicitation("deposit-1") == 0
        db.session.add(Order(id=1))
        db.session.flush()
        _refused_at_once_then_committed(db)
        assert mcp_flask.complete_elicitation("deposit-1") == 0
        db.session.remove()
    get_state(app).close()


async def _write_then_ask() -> Elicit:
    """A resolver that records a reservation (flushed, not committed), then asks."""
    from flask import current_app
    from sqlalchemy import text

    current_app.extensions["sqlalchemy"].session.execute(text("INSERT INTO reservation DEFAULT VALUES"))
    return Elicit("Which edition?", Edition)


def _reservations(tmp_path: Path, **config: Any) -> tuple[Flask, Callable[..., str], Callable[[str], Any]]:
    """An app whose models and MCP tables share one SQLite file (the default with
    Flask-SQLAlchemy), with a legacy session open, and ``call(first, then)``: its tool
    ``reserve`` first ``write``s a reservation (flushed), ``commit``s one or ``read``s them, then
    asks (``ask``) or logs (``log``); and ``call_modern(name)``, a 2026-07-28 call of a tool."""
    from flask_sqlalchemy import SQLAlchemy

    app = Flask("reserve", instance_path=str(tmp_path / "instance"))
    app.config.update(SECRET_KEY="x" * 40, SQLALCHEMY_DATABASE_URI="sqlite:///app.db", MCP_WAIT_DETACH_SECONDS=1)
    app.config.update(config)
    db = SQLAlchemy(app)

    class Reservation(db.Model):  # type: ignore[name-defined,misc]
        id = db.Column(db.Integer, primary_key=True)

    asking = MCPServer("Reservations")

    @asking.tool()
    async def reserve(ctx: Context, first: str, then: str) -> str:
        if first == "read":
            db.session.query(Reservation).count()
        else:
            db.session.add(Reservation())
            db.session.commit() if first == "commit" else db.session.flush()
        if then == "log":
            await ctx.info("Reserved.")
            return "logged"
        return str(await ctx.elicit("Which edition?", schema=Edition))

    @asking.tool()
    async def reserve_and_ask(edition: Annotated[ElicitationResult[Edition], Resolve(_write_then_ask)]) -> str:
        return str(edition)

    MCP(app, server=asking, db=db)
    MCP.migrate(app)
    with app.app_context():
        db.create_all()
    client = app.test_client()
    opened = client.post(
        "/mcp",
        json={**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": {"elicitation": {"form": {}}}}},
        headers={"Accept": SSE_AND_JSON},
    )
    headers = {"Accept": SSE_AND_JSON, "Mcp-Session-Id": opened.headers["Mcp-Session-Id"]}
    headers["MCP-Protocol-Version"] = "2025-11-25"

    def call(first: str, then: str) -> str:
        params = {"name": "reserve", "arguments": {"first": first, "then": then}}
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        return client.post("/mcp", json=body, headers=headers).get_data(as_text=True)

    def call_modern(name: str) -> Any:
        meta = {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {"elicitation": {"form": {}}}}
        params = {"name": name, "arguments": {}, "_meta": meta}
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}
        modern = {"Accept": SSE_AND_JSON, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}
        return client.post("/mcp", json=body, headers={**modern, "Mcp-Name": name})

    return app, call, call_modern


def test_a_tool_sending_with_an_uncommitted_write_to_the_shared_sqlite_file_is_told_to_commit_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A legacy tool records a reservation (``db.session.flush()``) and asks the user to confirm
    it: the question's row could not be written while the tool's session held the file's one
    write lock, so the call hung 20 s and failed with "database is locked". It fails at once,
    and the log says what to do; a tool that commits first is asked. A log or progress
    notification, written to the event log, likewise."""
    import time

    app, call, call_modern = _reservations(tmp_path)
    for then in ("ask", "log"):
        caplog.clear()
        started = time.monotonic()
        with caplog.at_level(logging.ERROR):
            answer = call("write", then)
        assert time.monotonic() - started < SQLITE_TIMEOUT / 2  # not SQLite's lock wait (20 s)
        assert '"isError":true' in answer and "elicitation/create" not in answer
        assert "db.session.commit() first, then send it" in caplog.text
    assert "Reserved." in call("commit", "log")
    assert "elicitation/create" in call("commit", "ask")  # asked: its row was written
    assert "Reserved." in call("read", "log")  # a read holds no write lock
    # A 2026-07-28 resolver that wrote, then asks: its question's row, likewise.
    caplog.clear()
    started = time.monotonic()
    with caplog.at_level(logging.ERROR):
        answer = call_modern("reserve_and_ask")
    assert time.monotonic() - started < SQLITE_TIMEOUT / 2
    assert answer.status_code == 500 and "db.session.commit() first, then send it" in caplog.text
    get_state(app).close()


def test_a_tool_that_only_read_in_a_transaction_it_began_itself_sends_as_ever(tmp_path: Path) -> None:
    """SQLAlchemy's pysqlite recipe for SAVEPOINTs (``isolation_level=None``, ``BEGIN`` on the
    begin event) has a transaction open after a mere read, which blocks no writer: the tool's
    log goes out."""
    from sqlalchemy import event

    options = {"connect_args": {"isolation_level": None}}
    app, call, _ = _reservations(tmp_path, SQLALCHEMY_ENGINE_OPTIONS=options, MCP_ENGINE_OPTIONS={})
    with app.app_context():
        engine = app.extensions["sqlalchemy"].engine
        event.listen(engine, "begin", lambda connection: connection.exec_driver_sql("BEGIN"))
    assert "Reserved." in call("read", "log")
    get_state(app).close()


def test_a_short_secret_key_is_logged_once_however_many_apps_use_it(
    make_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """A module with ``create_app()`` and ``app = create_app()`` builds two apps when the CLI
    is pointed at the factory (``flask --app shop:create_app mcp --help``): one weak key, one
    warning. Another weak key gets its own."""
    import secrets

    weak, other = secrets.token_hex(8), secrets.token_hex(8)  # keys no other test has used
    with caplog.at_level(logging.WARNING, "mcp_flask"):
        for key in (weak, weak, other, weak):
            MCP(make_app(SECRET_KEY=key), server=server)
    warned = [(r.name, r.levelname) for r in caplog.records if "SECRET_KEY is shorter" in r.getMessage()]
    assert warned == [("mcp_flask", "WARNING")] * 2
    assert weak not in caplog.text and other not in caplog.text


def run_flask(app_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``flask *args`` as a user runs it, in a process of its own, in ``app_dir``."""
    root = str(Path(mcp_flask.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(app_dir), root])}
    command = [sys.executable, "-m", "flask", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=app_dir, timeout=60)


def test_cli_help_says_a_short_secret_key_once(tmp_path: Path) -> None:
    """The command as a user runs it, with an app module that also builds its app at import."""
    (tmp_path / "weakapp.py").write_text(
        "from flask import Flask\nfrom mcp.server import MCPServer\nfrom mcp_flask import MCP\n"
        "def create_app():\n"
        f"    app = Flask(__name__, instance_path={str(tmp_path / 'instance')!r})\n"
        "    app.config['SECRET_KEY'] = 'short'\n    MCP(app, server=MCPServer('CLI'))\n    return app\n"
        "app = create_app()\n"
    )
    done = run_flask(tmp_path, "--app", "weakapp:create_app", "mcp", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("SECRET_KEY is shorter than 32 characters") == 1, done.stderr


def test_a_mistyped_mcp_key_is_logged_with_the_key_it_resembles(
    make_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """Django refuses an unknown ``MCP`` key (E001); a Flask app's ``MCP_*`` key that the
    extension does not know would otherwise be ignored without a word, its default in force."""
    typo = make_app(MCP_REQUEST_TIMOUT=5)
    with caplog.at_level(logging.WARNING, "mcp_flask"):
        MCP(typo, server=server)
    assert "MCP_REQUEST_TIMOUT (did you mean MCP_REQUEST_TIMEOUT?)" in caplog.text
    get_state(typo).close()
    caplog.clear()
    right = make_app(MCP_REQUEST_TIMEOUT=5, MCP_DB_THREADS=2, MCP_ENGINE_OPTIONS={})
    with caplog.at_level(logging.WARNING, "mcp_flask"):
        MCP(right, server=server)
    assert "MCP_" not in caplog.text
    get_state(right).close()


# -- routes and the view -----------------------------------------------------------------------


@pytest.fixture
def app(make_app: Callable[..., Flask], fast_config: dict[str, Any]) -> Flask:
    app = make_app(MCP_MAX_BODY_SIZE=2000, **fast_config)
    MCP(app, server=server)
    MCP.migrate(app)
    return app


def test_exact_path_no_redirect(app: Flask) -> None:
    client = app.test_client()
    assert client.post("/mcp/", json={}).status_code == 404  # not a 308 the client would not follow
    response = _initialize(client)
    assert response.status_code == 200
    assert response.headers["Mcp-Session-Id"]


@pytest.mark.parametrize("csrf_set_up", ["before MCP", "after MCP"])
def test_flask_wtf_csrf_protection_leaves_the_mcp_urls_alone(
    make_app: Callable[..., Flask], fast_config: dict[str, Any], csrf_set_up: str
) -> None:
    """Flask-WTF's ``CSRFProtect`` would answer every MCP POST with its HTML 400 (no client
    sends its token), whichever extension an app factory sets up first; the app's own POST
    routes stay protected."""
    from flask_wtf.csrf import CSRFProtect

    app = make_app(**fast_config)
    csrf = CSRFProtect()
    if csrf_set_up == "before MCP":
        csrf.init_app(app)
    MCP(app, server=server)
    if csrf_set_up == "after MCP":
        csrf.init_app(app)
    app.add_url_rule("/form", "form", lambda: "posted", methods=["POST"])
    MCP.migrate(app)
    client = app.test_client()
    opened = _initialize(client)
    assert opened.status_code == 200, opened.get_data(as_text=True)
    assert client.post("/form").status_code == 400


@pytest.mark.parametrize(
    "method", ["PUT", "PATCH", "TRACE", "CONNECT", "PROPFIND", "MKCOL", "QUERY", "BREW", "X-CUSTOM"]
)
def test_other_methods_get_a_json_rpc_405(app: Flask, method: str) -> None:
    response = app.test_client().open("/mcp", method=method)
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, POST, DELETE"
    assert response.is_json and response.json["error"]["code"] == -32600  # type: ignore[index]
    modern = app.test_client().open("/mcp", method=method, headers={"MCP-Protocol-Version": "2026-07-28"})
    assert (modern.status_code, modern.headers["Allow"], modern.is_json) == (405, "POST", True)


def test_a_cors_preflight_is_answered_for_a_cors_package_to_decorate(make_app: Callable[..., Flask]) -> None:
    """A browser's preflight (OPTIONS) got the endpoint's JSON-RPC 405, and a browser needs a
    2xx: Flask-CORS, which only adds its headers to the view's answer, could never let a
    browser-based client call. OPTIONS is answered with the methods the URL serves; the Origin
    check still comes first."""
    from flask_cors import CORS

    app = make_app(MCP_ALLOWED_ORIGINS=["https://inspector.example"])
    MCP(app, server=server)
    CORS(app, resources={r"/mcp": {"origins": "*"}})  # too lax: the endpoint's Origin check still holds
    MCP.migrate(app)
    client = app.test_client()
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,mcp-session-id",
    }
    for version in ({}, {"MCP-Protocol-Version": "2026-07-28"}):
        response = client.options("/mcp", headers={"Origin": "https://inspector.example", **preflight, **version})
        assert response.status_code == 204, response.get_data(as_text=True)
        assert response.headers["Allow"] == ("POST" if version else "GET, POST, DELETE")
        assert response.headers["Access-Control-Allow-Origin"] == "https://inspector.example"
        assert response.get_data() == b""
    refused = client.options("/mcp", headers={"Origin": "https://evil.example", **preflight})
    assert refused.status_code == 403 and refused.json["error"]["message"] == "Invalid Origin header"  # type: ignore[index]


def test_the_apps_other_routes_keep_their_own_405(app: Flask) -> None:
    app.add_url_rule("/other", "other", lambda: "other", methods=["POST"])
    response = app.test_client().open("/other", method="TRACE")
    assert response.status_code == 405 and not response.is_json
    assert set(response.headers["Allow"].split(", ")) == {"POST", "OPTIONS"}


@pytest.mark.parametrize(
    ("base_url", "origin", "status"),
    [
        ("https://localhost", "http://localhost", 403),  # a plain-HTTP page of this host
        ("https://localhost", "https://localhost", 200),
        ("http://localhost", "https://localhost", 200),  # HTTPS ended at a proxy Flask is not told of
        ("http://localhost", "http://localhost", 200),
    ],
)
def test_a_same_host_origin_must_be_https_when_the_request_is(
    app: Flask, base_url: str, origin: str, status: int
) -> None:
    client = app.test_client()
    listing = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    init = _initialize(client, base_url=base_url, Origin=origin)
    modern = client.post(
        "/mcp",
        json=listing,
        base_url=base_url,
        headers={
            "Accept": SSE_AND_JSON,
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/list",
            "Origin": origin,
        },
    )
    for response in (init, modern):
        assert response.status_code == status, response.data[:300]
        if status == 403:
            assert response.json["error"] == {"code": -32600, "message": "Invalid Origin header"}  # type: ignore[index]


@pytest.mark.parametrize(("origin", "status"), [("https://api.example.com", 200), ("http://api.example.com", 403)])
def test_behind_proxyfix_a_host_naming_its_default_port_is_the_same_origin(
    make_app: Callable[..., Flask], fast_config: dict[str, Any], origin: str, status: int
) -> None:
    """Behind ``ProxyFix(x_proto=1, x_host=1, x_port=1)`` the Host becomes
    ``api.example.com:443``; a browser on that site sends ``Origin: https://api.example.com``
    (it leaves the default port out): the same origin, which the endpoint refused."""
    from werkzeug.middleware.proxy_fix import ProxyFix

    app = make_app(MCP_ALLOWED_HOSTS=["api.example.com"], **fast_config)
    app.wsgi_app = ProxyFix(app.wsgi_app, x_proto=1, x_host=1, x_port=1)  # type: ignore[method-assign]
    MCP(app, server=server)
    MCP.migrate(app)
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com", "X-Forwarded-Port": "443"}
    try:
        response = _initialize(app.test_client(), Origin=origin, **forwarded)
        assert response.status_code == status, response.data[:300]
    finally:
        get_state(app).close()


def test_a_refused_host_or_origin_is_logged_with_the_setting_that_admits_it(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    """A client shows only "Invalid Host header": the log says which value and which key, as
    Django's own log of a refused Host does ("You may need to add ... to ALLOWED_HOSTS")."""
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "mcp_common"):
        assert _initialize(client, Host="shop.example.com:8000").status_code == 421
        assert _initialize(client, Origin="http://localhost:6274").status_code == 403
    assert "add 'shop.example.com' to MCP_ALLOWED_HOSTS" in caplog.text
    assert "add 'http://localhost:6274' to MCP_ALLOWED_ORIGINS" in caplog.text


def test_refusals_are_json(app: Flask) -> None:
    client = app.test_client()
    response = _initialize(client, Host="evil.example")
    assert response.status_code == 421 and response.is_json
    response = client.get("/mcp", headers={"Accept": "text/event-stream"})
    assert response.status_code == 400 and response.json["error"]["message"] == "Bad Request: Missing session ID"  # type: ignore[index]
    response = client.post("/mcp", data="{", headers={"Accept": SSE_AND_JSON, "Content-Type": "application/json"})
    assert response.status_code == 400 and response.json["error"]["code"] == -32700  # type: ignore[index]


@pytest.mark.parametrize("last_event_id", ["abc." + "9" * 30, "abc.\xb2"], ids=["past-int64", "superscript-two"])
def test_a_malformed_last_event_id_is_refused_before_the_store_reads_it(app: Flask, last_event_id: str) -> None:
    """Not a 200 stream that breaks off when SQLite cannot bind the number (or a 500)."""
    client = app.test_client()
    session = _initialize(client).headers["Mcp-Session-Id"]
    headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    response = client.get("/mcp", headers={**headers, "Last-Event-ID": last_event_id})
    assert response.status_code == 400
    assert response.json["error"] == {"code": -32600, "message": "Malformed Last-Event-ID"}  # type: ignore[index]


class _Unreadable(io.RawIOBase):
    def readinto(self, buffer: Any) -> int:
        raise AssertionError("the body was read")


@pytest.mark.parametrize("declared", ["2001", "002001", " 2001 ", "99999999999999999999"])
def test_declared_oversize_body_is_refused_before_reading(app: Flask, declared: str) -> None:
    response = app.test_client().post(
        "/mcp",
        headers={"Accept": SSE_AND_JSON, "Content-Type": "application/json"},
        environ_overrides={"CONTENT_LENGTH": declared, "wsgi.input": _Unreadable()},
    )
    assert response.status_code == 413
    assert response.json["error"]["message"] == "Request body too large (limit 2000 bytes)"  # type: ignore[index]


def test_chunked_oversize_body_is_refused(app: Flask) -> None:
    body = io.BytesIO(b"x" * 5000)
    response = app.test_client().post(
        "/mcp",
        input_stream=body,
        headers={"Accept": SSE_AND_JSON, "Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        # What a WSGI server sets when it de-chunks the body itself (werkzeug's, gunicorn).
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert response.status_code == 413 and response.is_json
    assert body.tell() == 2001  # read no further than one byte past the limit


def test_a_chunked_body_the_wsgi_server_did_not_de_chunk_is_411(app: Flask) -> None:
    """A WSGI server that passes a chunked body on undecoded (wsgiref) sets no Content-Length
    and no ``wsgi.input_terminated``: werkzeug reads it as empty. The client is told to send a
    length, not "Parse error" for the JSON it sent."""
    response = app.test_client().post(
        "/mcp",
        input_stream=io.BytesIO(json.dumps(INITIALIZE).encode()),
        headers={"Accept": SSE_AND_JSON, "Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        environ_overrides={"CONTENT_LENGTH": ""},  # as wsgiref passes it on
    )
    assert response.status_code == 411 and response.is_json
    error = response.json["error"]  # type: ignore[index]
    assert error["code"] == -32600 and "Content-Length" in error["message"]


def test_max_content_length_lower_than_mcp_limit(make_app: Callable[..., Flask]) -> None:
    app = make_app(MAX_CONTENT_LENGTH=100)
    MCP(app, server=server)
    response = app.test_client().post("/mcp", data="x" * 150, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.is_json


def test_principal_loader(make_app: Callable[..., Flask], fast_config: dict[str, Any]) -> None:
    from flask import request

    app = make_app(**fast_config)
    MCP(app, server=server, principal_loader=lambda: request.headers.get("X-User"))
    MCP.migrate(app)
    client = app.test_client()
    session_id = _initialize(client, **{"X-User": "alice"}).headers["Mcp-Session-Id"]
    record = get_state(app).store.get_session(session_id)
    assert record is not None and record.principal == "alice"
    # Bob cannot use Alice's session: it is answered as an unknown one.
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    headers = {"Accept": SSE_AND_JSON, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    assert client.post("/mcp", json=ping, headers={**headers, "X-User": "alice"}).status_code == 200
    assert client.post("/mcp", json=ping, headers={**headers, "X-User": "bob"}).status_code == 404


def test_flask_login_principal(make_app: Callable[..., Flask], fast_config: dict[str, Any]) -> None:
    flask_login = pytest.importorskip("flask_login")

    class User:
        is_authenticated = is_active = True
        is_anonymous = False

        def __init__(self, user_id: str) -> None:
            self.id = user_id

        def get_id(self) -> str:
            return self.id

    app = make_app(**fast_config)
    login_manager = flask_login.LoginManager(app)
    login_manager.user_loader(User)
    app.add_url_rule("/login", "login", lambda: str(flask_login.login_user(User("42"))), methods=["POST"])
    MCP(app, server=server)
    MCP.migrate(app)
    client = app.test_client()
    anonymous = _initialize(client).headers["Mcp-Session-Id"]
    client.post("/login")
    logged_in = _initialize(client).headers["Mcp-Session-Id"]
    store = get_state(app).store
    assert store.get_session(anonymous).principal is None  # type: ignore[union-attr]
    assert store.get_session(logged_in).principal == "flask-user:42"  # type: ignore[union-attr]


def test_a_failing_principal_loader_is_a_json_500(
    make_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> str | None:
        raise LookupError("boom")

    app = make_app()
    MCP(app, server=server, principal_loader=broken)
    with caplog.at_level(logging.ERROR, "mcp_flask"):
        response = _initialize(app.test_client())
    assert response.status_code == 500 and response.is_json
    assert "boom" not in response.get_data(as_text=True)
    assert "LookupError: boom" in caplog.text


def test_a_principal_loader_finding_the_pool_exhausted_is_a_json_503(make_app: Callable[..., Flask]) -> None:
    """Flask-Login's user loader queries the app's database: when its connection pool has no
    connection free in time, the client is told to retry."""
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    def exhausted() -> str | None:
        raise PoolTimeout("QueuePool limit of size 5 overflow 10 reached, connection timed out, timeout 30.00")

    app = make_app()
    MCP(app, server=server, principal_loader=exhausted)
    response = _initialize(app.test_client())
    assert (response.status_code, response.is_json, response.headers["Retry-After"]) == (503, True, "1")
    assert response.json["error"]["message"] == "Server busy: no database connection is free; retry shortly"


def test_tables_not_created_yet_the_log_says_to_run_the_migration(
    make_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """A newcomer who skipped ``flask mcp migrate`` (or ran ``db.create_all()``, which does not
    create the extension's tables) reads the fix in the traceback, not just "no such table"."""
    app = make_app()
    MCP(app, server=server)
    try:
        with caplog.at_level(logging.ERROR, "mcp_common"):
            response = _initialize(app.test_client())
    finally:
        get_state(app).close()
    assert response.status_code == 500 and response.is_json
    assert "flask mcp migrate" not in response.get_data(as_text=True)
    assert "no such table: mcp_session" in caplog.text
    assert "run `flask mcp migrate`" in caplog.text


def test_closing_a_stream_reaches_the_core(app: Flask) -> None:
    """The WSGI server's close() on the response ends the SSE stream: in the 2026-07-28 era
    that cancels the call."""
    cancelled.clear()
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "wait_forever",
            "arguments": {},
            "_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}, "progressToken": "p"},
        },
    }
    headers = {
        "Accept": SSE_AND_JSON,
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "wait_forever",
    }
    response = app.test_client().post("/mcp", json=body, headers=headers, buffered=False)
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    first = next(iter(response.response))
    assert b"notifications/progress" in first
    assert not cancelled.is_set()
    response.close()
    assert cancelled.wait(5)


def test_tools_run_in_the_app_context(make_app: Callable[..., Flask], fast_config: dict[str, Any]) -> None:
    from flask import current_app

    contextual = MCPServer("Contextual")
    seen: list[str] = []

    @contextual.tool()
    def app_name() -> str:
        """Which app serves me (a sync tool: runs in a worker thread)."""
        seen.append(current_app.name)
        return current_app.name

    @contextual.tool()
    async def app_name_async() -> str:
        """Which app serves me (async: runs on the event loop)."""
        return str(current_app.config["MARKER"])

    app = make_app(MARKER="first", MCP_JSON_RESPONSE=True, **fast_config)
    MCP(app, server=contextual)
    MCP.migrate(app)
    client = app.test_client()
    endpoint = get_state(app).endpoints["/mcp"]
    # The fast path serves both, from the first request on (it enters the server's lifespan first).
    assert endpoint.fast.enabled
    served_fast: list[str] = []
    original = endpoint.fast._respond

    def spy(call: Any, outcome: Any) -> Any:
        served_fast.append(call.tool.name)
        return original(call, outcome)

    endpoint.fast._respond = spy  # type: ignore[method-assign]
    for name, expected in (("app_name", app.name), ("app_name_async", "first")) * 2:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": name,
                "arguments": {},
                "_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}},
            },
        }
        headers = {
            "Accept": SSE_AND_JSON,
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": name,
        }
        response = client.post("/mcp", json=body, headers=headers)
        assert response.status_code == 200, response.get_data(as_text=True)
        result = json.loads(response.get_data(as_text=True))["result"]
        assert result["content"][0]["text"] == expected, result
    assert seen == [app.name, app.name]
    assert served_fast == ["app_name", "app_name_async", "app_name", "app_name_async"]


# -- commands ----------------------------------------------------------------------------------


def test_cli_migrate_says_what_it_did_in_one_line(
    make_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """``flask mcp migrate`` prints one line saying what it did, and nothing of Alembic's chatter
    reaches the log: the SDK's ``MCPServer()`` sets the root logger to INFO, so Alembic's INFO
    lines ("Context impl SQLiteImpl.", "Running upgrade ...") would land on the user's terminal."""
    app = make_app()
    MCP(app, server=server)
    url = app.config["MCP_DATABASE_URI"]
    runner = app.test_cli_runner()
    with caplog.at_level(logging.INFO):
        first = runner.invoke(args=["mcp", "migrate"])
        again = runner.invoke(args=["mcp", "migrate"])
    assert first.exit_code == 0 and again.exit_code == 0, (first.output, again.output)
    assert first.output == f"Created the MCP tables (revision mcp_0006) in {url}.\n"
    assert again.output == f"The MCP tables in {url} are already at revision mcp_0006: nothing to do.\n"
    chatter = [r for r in caplog.records if r.name.startswith("alembic") and r.levelno < logging.WARNING]
    assert chatter == [], [r.getMessage() for r in chatter]


def test_cli_migrate_prints_nothing_else_on_a_terminal(tmp_path: Path) -> None:
    """The command as a user runs it, in a process of its own: Alembic logs its plugins when it
    is first imported, which no in-process test can see again."""
    (tmp_path / "cliapp.py").write_text(
        "from flask import Flask\nfrom mcp.server import MCPServer\nfrom mcp_flask import MCP\n"
        f"app = Flask(__name__, instance_path={str(tmp_path / 'instance')!r})\n"
        "app.config['SECRET_KEY'] = 'x' * 40\nMCP(app, server=MCPServer('CLI'))\n"
    )
    for _ in range(2):
        done = run_flask(tmp_path, "--app", "cliapp", "mcp", "migrate")
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert len(done.stdout.splitlines()) == 1, done.stdout


def test_cli_migrate_and_purge(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    MCP(app, server=server)
    runner = app.test_cli_runner()
    result = runner.invoke(args=["mcp", "migrate"])
    assert result.exit_code == 0, result.output
    assert "mcp_0006" in result.output
    result = runner.invoke(args=["mcp", "purge"])
    assert result.exit_code == 0 and "Deleted 0 expired MCP session(s)" in result.output
    import time as _time

    from mcp_common.elicitation import new_record
    from mcp_common.store import RequestStateRecord
    from mcp_flask import get_state

    store = get_state(app).store
    old = _time.time() - 40 * 86400
    rows = []
    for status in ("accepted", "pending"):
        row = new_record(
            server_name="s",
            tool="t",
            params={"message": "?"},
            request_key=status,
            principal=None,
            expires=old,
            state_id="0" * 32,
        )
        rows.append(row.__class__(**{**row.__dict__, "status": status, "created": old, "updated": old}))
    store.save_request_state(RequestStateRecord("0" * 32, "s", "tools/call", "t", "d", None, "x", old, old), rows)
    result = runner.invoke(args=["mcp", "purge", "--elicitation-days", "30"])
    assert result.exit_code == 0, result.output
    assert "1 old elicitation(s); marked 1 overdue elicitation(s) expired." in result.output
    assert [r.status for r in store.elicitations_for_state("0" * 32)] == ["expired"]


@pytest.mark.parametrize("days", ["-1", "nan", "inf"])
def test_cli_purge_refuses_a_number_of_days_that_is_not_one_and_deletes_nothing(
    make_app: Callable[..., Flask], days: str
) -> None:
    """``--elicitation-days -1`` (a typo) must not delete every answered question, the one a
    webhook completed a moment ago among them; nor may a value end in a traceback."""
    import time as _time

    from mcp_common.elicitation import new_record
    from mcp_common.store import RequestStateRecord
    from mcp_flask import get_state

    app = make_app()
    MCP(app, server=server)
    runner = app.test_cli_runner()
    assert runner.invoke(args=["mcp", "migrate"]).exit_code == 0
    store = get_state(app).store
    now = _time.time()
    row = new_record(
        server_name="s", tool="t", params={"message": "?"}, request_key="k", principal=None, expires=now + 60
    )
    row = row.__class__(**{**row.__dict__, "status": "completed", "state_id": "0" * 32})
    store.save_request_state(RequestStateRecord("0" * 32, "s", "tools/call", "t", "d", None, "x", now, now), [row])
    result = runner.invoke(args=["mcp", "purge", "--elicitation-days", days])
    assert result.exit_code == 2 and result.exception is not None, result.output
    assert "--elicitation-days" in result.output and "a number of days, 0 or more" in result.output
    assert store.get_elicitation(row.id) is not None
    assert runner.invoke(args=["mcp", "purge", "--elicitation-days", "1e300"]).exit_code == 0  # all kept
    assert store.get_elicitation(row.id) is not None
    assert runner.invoke(args=["mcp", "purge", "--elicitation-days", "0"]).exit_code == 0
    assert store.get_elicitation(row.id) is None


def test_cli_migrate_to_an_unknown_revision_is_a_usage_error(make_app: Callable[..., Flask]) -> None:
    """A mistyped ``--revision`` is the user's mistake: click's one-line error and exit status
    2, not Alembic's traceback."""
    app = make_app()
    MCP(app, server=server)
    result = app.test_cli_runner().invoke(args=["mcp", "migrate", "--revision", "mcp_0099"])
    assert result.exit_code == 2, result.output
    assert "Can't locate revision identified by 'mcp_0099'" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_cli_migrate_to_an_earlier_revision_says_it_downgraded_and_base_that_it_dropped(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app()
    MCP(app, server=server)
    runner = app.test_cli_runner()
    assert runner.invoke(args=["mcp", "migrate"]).exit_code == 0
    result = runner.invoke(args=["mcp", "migrate", "--revision", "mcp_0003"])
    assert result.exit_code == 0, result.output
    assert "Downgraded the MCP tables in sqlite:///" in result.output
    assert result.output.rstrip().endswith("from revision mcp_0006 to mcp_0003."), result.output
    result = runner.invoke(args=["mcp", "migrate", "--revision", "base"])
    assert result.exit_code == 0, result.output
    assert "Dropped the MCP tables from sqlite:///" in result.output
    assert result.output.rstrip().endswith("(they were at revision mcp_0003)."), result.output
    result = runner.invoke(args=["mcp", "migrate", "--revision", "base"])
    assert "There are no MCP tables in sqlite:///" in result.output, result.output


def test_migrate_takes_an_app_or_an_engine(make_app: Callable[..., Flask]) -> None:
    import sqlalchemy as sa

    from mcp_flask import migrate

    app = make_app()
    MCP(app, server=server)
    migrate(app)  # what the example launcher calls
    engine = get_state(app).engine
    assert "mcp_session" in sa.inspect(engine).get_table_names()
    migrate(engine)
    with app.app_context():
        migrate()  # the current app


def test_get_state_without_init_app() -> None:
    with pytest.raises(RuntimeError, match="Did you forget to call 'init_app'"):
        get_state(Flask("bare"))
    with pytest.raises(RuntimeError, match="outside of application context"):
        get_state()


def test_example_app_settings(monkeypatch: pytest.MonkeyPatch, sqlite_uri: str) -> None:
    from example_project.flask_app import create_app
    from example_project.settings_common import SECRET_KEY, SERVERS

    monkeypatch.setenv("MCP_EXAMPLE_STREAM_HOLD", "3")
    app = create_app({"MCP_DATABASE_URI": sqlite_uri})
    state = get_state(app)
    assert sorted(state.endpoints) == sorted(f"/mcp{suffix}" for suffix in SERVERS)
    assert state.config.stream_hold_seconds == 3.0
    assert state.config.secret_keys == (SECRET_KEY,)


def test_example_payment_webhook_refuses_a_non_ascii_token_with_401(sqlite_uri: str) -> None:
    from example_project.flask_app import create_app

    app = create_app({"MCP_DATABASE_URI": sqlite_uri})
    answer = app.test_client().post(
        "/payments/webhook", json={"elicitation_id": "deposit-1"}, headers={"Authorization": "Bearer d\u00e9mo"}
    )
    assert answer.status_code == 401 and answer.get_json() == {"error": "unauthorized"}


@pytest.mark.parametrize("body", [b'{"elicitation_id":' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"[1]"])
def test_example_payment_webhook_refuses_a_body_it_cannot_read_with_400(sqlite_uri: str, body: bytes) -> None:
    from example_project.flask_app import create_app

    app = create_app({"MCP_DATABASE_URI": sqlite_uri})
    answer = app.test_client().post(
        "/payments/webhook",
        data=body,
        content_type="application/json",
        headers={"Authorization": "Bearer demo-webhook-token"},
    )
    assert answer.status_code == 400 and answer.get_json() == {"error": 'expected {"elicitation_id": "..."}'}


def test_trusted_hosts_refusal_is_json_on_mcp_urls(make_app: Callable[..., Flask]) -> None:
    app = make_app(TRUSTED_HOSTS=["localhost"])
    app.add_url_rule("/page", "page", lambda: "page")
    MCP(app, server=server)
    client = app.test_client()
    response = _initialize(client, Host="evil.example")
    assert response.status_code == 421 and response.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Invalid Host header"},
    }
    # Elsewhere Flask answers as it always does: TRUSTED_HOSTS is Flask 3.1's (3.0 ignores it).
    from importlib.metadata import version

    flask_3_1 = tuple(int(part) for part in version("flask").split(".")[:2]) >= (3, 1)
    assert client.get("/page", headers={"Host": "evil.example"}).status_code == (400 if flask_3_1 else 200)


def test_a_host_werkzeug_cannot_route_is_a_json_421_on_mcp_urls(make_app: Callable[..., Flask]) -> None:
    """A DNS label past 63 characters does not encode as IDNA: werkzeug refuses to route the
    request (``BadHost``) before any view runs, which Flask answers with its HTML 400 page."""
    app = make_app()
    app.add_url_rule("/page", "page", lambda: "page")
    MCP(app, server=server)
    client = app.test_client()
    host = "a" * 64 + ".example"
    response = _initialize(client, Host=host)
    assert response.status_code == 421 and response.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Invalid Host header"},
    }
    assert client.get("/page", headers={"Host": host}).status_code == 400


def test_example_worker_header(monkeypatch: pytest.MonkeyPatch, sqlite_uri: str) -> None:
    import os

    from example_project.flask_app import create_app

    monkeypatch.setenv("MCP_EXAMPLE_WORKER_HEADER", "1")
    app = create_app({"MCP_DATABASE_URI": sqlite_uri})
    assert app.test_client().get("/").headers["X-Example-Worker"] == str(os.getpid())


def test_request_without_host_header_uses_the_server_name(app: Flask) -> None:
    from werkzeug.test import EnvironBuilder, run_wsgi_app

    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    builder = EnvironBuilder(path="/mcp", method="POST", json=body, headers=[("Accept", SSE_AND_JSON)])
    environ = builder.get_environ()
    del environ["HTTP_HOST"]  # an HTTP/1.0 client
    environ.update(SERVER_NAME="127.0.0.1", SERVER_PORT="8000")
    _, status, headers = run_wsgi_app(app, environ, buffered=True)
    assert status == "200 OK"
    assert headers.get("Mcp-Session-Id")


def test_the_servers_lifespan_has_the_app_and_no_request(make_app: Callable[..., Flask]) -> None:
    """The first request enters the server's lifespan, which runs for the life of the
    process: like a CLI command, it has an application context of the app, not that request."""
    from flask import current_app, has_app_context, has_request_context

    seen: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        seen["app"] = current_app.name if has_app_context() else None
        seen["request"] = has_request_context()
        yield {}

    lifespan_server = MCPServer("Lifespan", lifespan=lifespan)
    app = make_app()
    app.name = "the-app"
    MCP(app, server=lifespan_server)
    MCP.migrate(app)
    try:
        response = _initialize(app.test_client())
        assert response.status_code == 200, response.data[:300]
    finally:
        get_state(app).close()
    assert seen == {"app": "the-app", "request": False}


def test_close_ends_the_database_threads_of_each_apps_endpoints(make_app: Callable[..., Flask]) -> None:
    """A test suite's app factory builds an app per test and closes it in teardown
    (``MCPState.close()``): each app's endpoints had started database threads of their own,
    which stayed alive, idle, for the process's life: a thread more per app and test. They
    end with ``close()``; a request after it starts them again."""

    def database_threads(app: Flask) -> list[threading.Thread]:
        # This app's endpoints' own (other tests' endpoints start theirs at any time).
        endpoints = get_state(app).endpoints.values()
        return [t for e in endpoints if e._executor is not None for t in list(e._executor._threads)]

    def alive(threads: list[threading.Thread]) -> list[str]:
        return [t.name for t in threads if t.is_alive()]

    for _ in range(3):
        app = make_app()
        MCP(app, server=server)
        MCP.migrate(app)
        assert _initialize(app.test_client()).status_code == 200
        threads = database_threads(app)
        assert alive(threads)
        get_state(app).close()
        assert alive(threads) == [] and database_threads(app) == []
    assert _initialize(app.test_client()).status_code == 200  # served after close(), as before
    threads = database_threads(app)
    assert alive(threads)
    get_state(app).close()
    assert alive(threads) == [] and database_threads(app) == []


FIRST_APP_IS_COLLECTED = """
import asyncio, gc, sys, time, weakref
from flask import Flask
from mcp.server import MCPServer
from mcp_common.loop import LoopRunner
from mcp_flask import MCP, get_state

server = MCPServer("gc")
mcp = MCP(server=server)
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}

def create_app():
    app = Flask("gc_app", instance_path=sys.argv[1])
    app.config.update(SECRET_KEY="k" * 40, MCP_DATABASE_URI="sqlite://")
    mcp.init_app(app)
    MCP.migrate(app)
    return app

apps = []
for _ in range(2):
    app = create_app()
    response = app.test_client().post("/mcp", json=INIT, headers={"Accept": "application/json, text/event-stream"})
    assert response.status_code == 200, response.data
    get_state(app).close()
    apps.append(weakref.ref(app))
    del app, response
# The endpoints' idle-connection check is due a second after their last query (later on a busy
# machine): polled for up to 10 s. asyncio's idle loop keeps the last cancelled timer it
# dropped (the heartbeat's, in the lifespan's app context) in a local until it next wakes:
# each poll wakes it.
deadline = time.monotonic() + 10
while True:
    time.sleep(0.25)
    for _ in range(2):
        LoopRunner.shared().run(asyncio.sleep(0))
    gc.collect()
    if all(ref() is None for ref in apps) or time.monotonic() > deadline:
        break
print([ref() is None for ref in apps])
"""


def test_an_app_closed_by_its_tests_teardown_is_garbage_collected(tmp_path: Path) -> None:
    """The README's test fixture builds an app per test and closes it in teardown. The process's
    event loop was created by the first MCP request, in its context: the loop kept that request's
    Flask contexts, and with them the first app, its engine and its request, for the process's
    life. In a process of its own, so that this request is the first."""
    root = str(Path(mcp_flask.__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", FIRST_APP_IS_COLLECTED, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[True, True]", done.stderr[-2000:]


@pytest.mark.parametrize(
    ("name", "problem"), [("shop-" + "x" * 196, "201 characters long, longer than 200"), ("shop\x00", "NUL")]
)
def test_a_server_name_no_row_can_keep_is_refused_at_start_up(
    make_app: Callable[..., Flask], name: str, problem: str
) -> None:
    """Sessions, questions and request states keep their server's name: one longer than their
    column, or with a NUL, failed every session and question on PostgreSQL (HTTP 500)."""
    app = make_app()
    with pytest.raises(ValueError, match=problem):
        MCP(app, servers={"/a": MCPServer(name)})
    assert "mcp" not in app.extensions


def test_different_servers_under_one_name_are_refused_at_start_up(make_app: Callable[..., Flask]) -> None:
    """Two unnamed ``MCPServer()`` are both "mcp-server": sessions, questions and request states
    are kept by server name, so each would take the other's. One server at two URLs is fine."""
    app = make_app()
    with pytest.raises(ValueError, match=r"/a and /b are different servers with the same name 'mcp-server'"):
        MCP(app, servers={"/a": MCPServer(), "/b": MCPServer()})
    assert "mcp" not in app.extensions
    shared = MCPServer("Shared")
    app = make_app()
    MCP(app, servers={"/a": shared, "/b": shared})
    assert set(app.extensions["mcp"].endpoints) == {"/a", "/b"}
    get_state(app).close()


def test_the_sqlite_checkpoint_interval_reaches_the_store(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    MCP(app, server=server)
    lock = get_state(app).store._write_lock
    assert app.config["MCP_SQLITE_CHECKPOINT_INTERVAL"] == 0.2
    assert lock is not None and lock.checkpointer is not None and lock.checkpointer.interval == 0.2
    get_state(app).close()
    off = make_app(MCP_SQLITE_CHECKPOINT_INTERVAL=0)
    MCP(off, server=server)
    lock = get_state(off).store._write_lock
    assert lock is not None and lock.checkpointer is None
    get_state(off).close()
