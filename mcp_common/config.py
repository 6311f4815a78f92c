"""The one frozen configuration object the core reads.

Adapters build it once (Django from ``settings.MCP``, Flask from ``MCP_*`` keys) and hand it
to :class:`mcp_common.endpoint.MCPEndpoint`; the core never reads framework settings itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class MCPConfig:
    """Everything the request pipeline needs to know about its deployment."""

    allowed_hosts: tuple[str, ...] = ()
    """Host header values accepted (DNS-rebinding protection). ``"*"`` accepts any; a leading dot
    matches a domain and its subdomains (Django's ``ALLOWED_HOSTS`` syntax); ``host:*`` any port.
    Empty means: only loopback names."""

    allowed_origins: tuple[str, ...] = ()
    """Origin header values accepted besides the request's own host. ``"*"`` accepts any."""

    hosts_setting: str = "the allowed hosts"
    """The setting behind ``allowed_hosts``, named in the warning a refused Host logs (the
    client is told only "Invalid Host header")."""

    origins_setting: str = "the allowed origins"
    """The setting behind ``allowed_origins``, named likewise when an Origin is refused."""

    max_body_size: int = 4 * 1024 * 1024
    """Largest request body accepted, in bytes; larger ones get HTTP 413."""

    secret_keys: tuple[str, ...] = ()
    """The application's secret key followed by its rotation fallbacks. Request-state keys are
    derived from these so that state minted by one worker is accepted by every other."""

    session_ttl: float = 24 * 3600
    """Seconds a legacy session may stay idle before it is treated as ended."""

    request_timeout: float = 600.0
    """Seconds a tool waits for the client's answer to a server-to-client request. An
    elicitation that times out ends as ``cancel``; other requests fail with an error."""

    sse_retry_ms: int = 1000
    """The ``retry:`` hint (milliseconds) sent in priming events."""

    stream_hold_seconds: float = 25.0
    """How long an idle SSE stream (GET, or a resumed call stream) is held open before the
    server closes it; the client reconnects with ``Last-Event-ID`` and loses nothing. Under
    WSGI, ``blocking_hold_seconds`` instead."""

    wait_detach_seconds: float = 0.25
    """Under WSGI (a thread per open response), a call that has waited this long for the
    client's answer ends its SSE response with a ``wait_retry_ms`` hint; the client resumes
    with ``Last-Event-ID`` and gets the rest from the event log. A quick answer arrives on the
    open stream; a human who takes minutes parks no worker thread. (Protocol 2025-11-25 and
    later, whose clients resume closed streams; ASGI keeps streams open: no thread per
    stream there.)"""

    wait_retry_ms: int = 1000
    """The ``retry:`` hint of a stream ended while its call waits (see ``wait_detach_seconds``),
    and of every SSE stream under WSGI (see ``blocking_hold_seconds``)."""

    blocking_hold_seconds: float = 0.5
    """Under WSGI, how long a resumed call stream, or a session's GET stream, waits for new
    events before ending with the ``wait_retry_ms`` hint: every connected legacy client keeps
    a GET stream open, and each open stream is a thread there."""

    poll_interval: float = 0.1
    """Seconds between database polls when an answer or event may come from another process."""

    request_state_ttl: float = 600.0
    """Seconds a 2026-07-28 ``requestState`` (and the elicitations its round asked) stays valid;
    after that the client's retry is refused and the pending elicitations are marked expired."""

    heartbeat_interval: float = 10.0
    """Seconds between a worker's heartbeats. A legacy call whose worker has not beaten for three
    intervals (or, on the same host, whose process is gone) is ended with an error when its
    client resumes the stream; the same beat marks overdue elicitations expired."""

    db_threads: int = 8
    """Threads (each with its own database connection, once used) per endpoint and process for
    the store's queries that no request's thread takes: the heartbeat, a legacy call's work after
    its stream ended, every store query under ASGI. Budget the database's connections with it:
    up to this many per MCP URL and process, besides the request threads' own."""

    json_response: bool = False
    """Answer every request with JSON, never SSE (loses mid-call server-to-client requests)."""

    sqlite_checkpoint_interval: float = 0.2
    """On a SQLite file in WAL mode, the least seconds between two checkpoints a background
    thread of each process runs after the store's writes (:mod:`mcp_common.checkpoint`); ``0``
    leaves checkpoints to SQLite, inside whichever commit takes the log past its limit."""

    extra: dict[str, object] = field(default_factory=dict, compare=False)

    def request_state_keys(self) -> list[bytes]:
        """Request-state sealing keys derived from the secret keys, the current one first."""
        return [derive_key(secret, "request-state") for secret in self.secret_keys]


def derive_key(secret: str, purpose: str) -> bytes:
    """A 32-byte key for ``purpose`` derived from an application secret.

    Deriving (rather than using ``SECRET_KEY`` directly) keeps request-state keys independent
    from the framework's own signing keys.
    """
    return hashlib.sha256(f"mcp-django-flask/{purpose}/".encode() + secret.encode()).digest()


def secret_chain(secret: str | None, fallbacks: Sequence[str] = ()) -> tuple[str, ...]:
    """The secret followed by its fallbacks, empties dropped."""
    return tuple(s for s in (secret, *fallbacks) if s)


def shared_names(routed: Sequence[tuple[str, Any]]) -> list[str]:
    """What is wrong with the names of the servers these ``(url, server)`` pairs serve.

    Sessions, questions and request states are kept by server name: different servers under
    one name would each take the other's (a session, a handle redeemed by the other's tool of
    the same name), and a name longer than the rows' column, or with a NUL or a lone surrogate,
    fails every session and question on PostgreSQL and MariaDB. One server at several URLs is
    fine."""
    from mcp_common import _sdk
    from mcp_common.store import MAX_SERVER_NAME, storable

    seen: dict[str, tuple[str, Any]] = {}
    problems: list[str] = []
    for url, server in routed:
        name = _sdk.lowlevel_server(server).name
        first = seen.setdefault(name, (url, server))
        if first[1] is not server:
            problems.append(
                f"The MCP servers at {first[0]} and {url} are different servers with the same name {name!r}: "
                "sessions, questions and request states are kept by server name, so each would take the "
                'other\'s. Give each its own name: MCPServer("...").'
            )
        elif first[0] != url:
            continue  # the same server at another URL: its name was checked there
        elif len(name) > MAX_SERVER_NAME:
            problems.append(
                f"The MCP server at {url} is named {name[:40]!r}..., {len(name)} characters long, longer than "
                f"{MAX_SERVER_NAME} (what the database keeps of it on every session and question). "
                'Give it a shorter name: MCPServer("...").'
            )
        elif not storable(name):
            problems.append(
                f"The MCP server at {url} is named {name!r}, with a NUL or a lone surrogate, which "
                'PostgreSQL cannot keep on its sessions and questions. Give it another name: MCPServer("...").'
            )
    return problems
