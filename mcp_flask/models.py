"""What an MCP conversation keeps between requests (the core's ``SessionStore``).

The tables live on their own :data:`metadata`, not on the application's ``db.Model``: the
extension ships its own Alembic history (``flask mcp migrate``), and the application's
Flask-Migrate history never sees, creates or drops them. The columns are those of
``mcp_django.models``; the names differ (``mcp_session`` rather than
``mcp_django_mcpsession``), and so do index and constraint names, so that a Django site and a
Flask app can share one database.

An application that autogenerates its own migrations against the same database should pass
:func:`include_object` to Alembic (``Migrate(app, db, include_object=include_object)``), or
autogenerate will propose dropping these tables.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, Boolean, DateTime, Index, Integer, MetaData, String, Text, UniqueConstraint
from sqlalchemy.dialects.mysql import DATETIME as MYSQL_DATETIME
from sqlalchemy.dialects.mysql import LONGTEXT
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

VERSION_TABLE = "mcp_alembic_version"
"""Alembic's version table for this package's history, apart from the application's own."""

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)
"""The extension's own ``MetaData``: the tables below and nothing else."""

# SQLite only auto-increments an INTEGER PRIMARY KEY (a rowid alias), not a BIGINT one.
BigAutoId = BigInteger().with_variant(Integer(), "sqlite")
LongText = Text().with_variant(LONGTEXT(), "mysql", "mariadb")
"""Text of any length. MySQL's and MariaDB's ``TEXT`` holds 64 kB, less than one answer, event
or state a client's request (up to ``MCP_MAX_BODY_SIZE``) or a tool's result can make."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL keeps the offset (``timestamptz``); SQLite keeps none, so values are stored as
    UTC wall time and read back as UTC, never as the server's local time. MySQL and MariaDB
    keep none either, and their plain ``DATETIME`` drops the microseconds: ``DATETIME(6)``
    there (as Django's ``DateTimeField``), so an instant reads back as the one written.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(MYSQL_DATETIME(fsp=6))
        return dialect.type_descriptor(self.impl)

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("UTCDateTime needs a timezone-aware datetime")
        return value.astimezone(dt.UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        stamp: dt.datetime = value
        # PostgreSQL answers in the connection's time zone (the server's, unless set): UTC here.
        return stamp.replace(tzinfo=dt.UTC) if stamp.tzinfo is None else stamp.astimezone(dt.UTC)


class MCPModel(DeclarativeBase):
    """Declarative base of the extension's models, bound to :data:`metadata`."""

    metadata = metadata


class MCPSession(MCPModel):
    """A legacy-era (protocol ≤ 2025-11-25) session, created by ``initialize``."""

    __tablename__ = "mcp_session"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    server_name: Mapped[str] = mapped_column(String(200))
    protocol_version: Mapped[str] = mapped_column(String(32))
    client_params: Mapped[str] = mapped_column(LongText, doc="The client's initialize params, as JSON.")
    principal: Mapped[str | None] = mapped_column(String(255))
    get_cursor: Mapped[int] = mapped_column(BigInteger, default=0, doc="Last event delivered on a GET stream.")
    created: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    last_seen: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)

    def __repr__(self) -> str:
        return f"<MCPSession {self.session_id}>"


class MCPEvent(MCPModel):
    """One SSE event of a session, kept so any worker can resume a stream with Last-Event-ID."""

    __tablename__ = "mcp_event"
    __table_args__ = (Index("ix_mcp_event_stream", "session_id", "stream_key", "id"),)

    id: Mapped[int] = mapped_column(BigAutoId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(64))
    stream_key: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(LongText)
    final: Mapped[bool] = mapped_column(Boolean, default=False)
    created: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    def __repr__(self) -> str:
        return f"<MCPEvent {self.id} {self.stream_key}>"


class MCPPendingRequest(MCPModel):
    """A server-to-client request (elicitation, sampling, roots) waiting for the client."""

    __tablename__ = "mcp_pending_request"
    __table_args__ = (
        UniqueConstraint("session_id", "request_id", name="uq_mcp_pending_request"),
        Index("ix_mcp_pending_request_answered", "answered"),
    )

    id: Mapped[int] = mapped_column(BigAutoId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str] = mapped_column(String(64))
    method: Mapped[str] = mapped_column(String(64))
    params: Mapped[str] = mapped_column(LongText)
    response: Mapped[str | None] = mapped_column(LongText)
    created: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    answered: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    def __repr__(self) -> str:
        return f"<MCPPendingRequest {self.session_id} {self.request_id}>"


class MCPElicitation(MCPModel):
    """A question a tool asked a user, in either protocol era, and what became of it.

    The audit trail of elicitations: deleting a session leaves its rows here.
    """

    __tablename__ = "mcp_elicitation"
    __table_args__ = (
        Index("ix_mcp_elicitation_request", "session_id", "request_key"),
        Index("ix_mcp_elicitation_stream", "session_id", "stream_key"),
        # Both columns the redemption names: a planner without statistics (SQLite) would
        # otherwise take the status index and walk every pending row.
        Index("ix_mcp_elicitation_state", "state_id", "request_key"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    server_name: Mapped[str] = mapped_column(String(200))
    tool: Mapped[str | None] = mapped_column(String(200))
    session_id: Mapped[str | None] = mapped_column(String(64), doc="Legacy session that asked.")
    state_id: Mapped[str | None] = mapped_column(String(32), doc="2026-07-28 request state that asked.")
    request_key: Mapped[str] = mapped_column(String(200), doc="Server-to-client request id, or inputRequests key.")
    principal: Mapped[str | None] = mapped_column(String(255))
    mode: Mapped[str] = mapped_column(String(8), doc="form or url.")
    message: Mapped[str] = mapped_column(LongText)
    requested_schema: Mapped[str | None] = mapped_column(LongText)
    url: Mapped[str | None] = mapped_column(LongText)
    elicitation_id: Mapped[str | None] = mapped_column(String(255), index=True)
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    answer: Mapped[str | None] = mapped_column(LongText)
    detail: Mapped[str | None] = mapped_column(LongText)
    owner: Mapped[str | None] = mapped_column(String(255), doc="Worker whose call waits.")
    stream_key: Mapped[str | None] = mapped_column(String(64))
    call_id: Mapped[str | None] = mapped_column(String(255), doc="The asking call's JSON-RPC id.")
    created: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    updated: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    expires: Mapped[dt.datetime] = mapped_column(UTCDateTime)

    def __repr__(self) -> str:
        return f"<MCPElicitation {self.mode} {self.elicitation_id or self.id} ({self.status})>"


class MCPRequestState(MCPModel):
    """A 2026-07-28 requestState behind a single-use handle."""

    __tablename__ = "mcp_request_state"

    state_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    server_name: Mapped[str] = mapped_column(String(200))
    method: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(LongText)
    args_digest: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str | None] = mapped_column(String(255))
    sealed: Mapped[str] = mapped_column(LongText)
    created: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    expires: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    consumed: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    def __repr__(self) -> str:
        return f"<MCPRequestState {self.state_id}>"


class MCPWorker(MCPModel):
    """A worker process's heartbeat: a call whose worker stopped beating is ended as failed."""

    __tablename__ = "mcp_worker"

    worker_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    last_beat: Mapped[dt.datetime] = mapped_column(UTCDateTime)

    def __repr__(self) -> str:
        return f"<MCPWorker {self.worker_id}>"


TABLES = frozenset(metadata.tables)
"""The names of the extension's tables."""


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """An Alembic ``include_object`` hook that hides the extension's tables from an application's
    own autogenerate (so it never proposes to drop them)."""
    if type_ == "table":
        return name not in TABLES and name != VERSION_TABLE
    table = getattr(obj, "table", None)
    return getattr(table, "name", None) not in TABLES
