"""What an MCP conversation keeps between requests (the core's ``SessionStore``)."""

from __future__ import annotations

from django.db import models


class MCPSession(models.Model):
    """A legacy-era (protocol ≤ 2025-11-25) session, created by ``initialize``."""

    session_id = models.CharField(max_length=64, primary_key=True)
    server_name = models.CharField(max_length=200)
    protocol_version = models.CharField(max_length=32)
    client_params = models.TextField(help_text="The client's initialize params, as JSON.")
    principal = models.CharField(max_length=255, null=True, blank=True)
    get_cursor = models.BigIntegerField(default=0, help_text="Last event delivered on a GET stream.")
    created = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "MCP session"

    def __str__(self) -> str:
        return self.session_id


class MCPEvent(models.Model):
    """One SSE event of a session, kept so any worker can resume a stream with Last-Event-ID."""

    id = models.BigAutoField(primary_key=True)
    session_id = models.CharField(max_length=64)
    stream_key = models.CharField(max_length=64)
    message = models.TextField()
    final = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "MCP event"
        indexes = [models.Index(fields=["session_id", "stream_key", "id"], name="mcp_event_stream")]


class MCPPendingRequest(models.Model):
    """A server-to-client request (elicitation, sampling, roots) waiting for the client."""

    session_id = models.CharField(max_length=64)
    request_id = models.CharField(max_length=64)
    method = models.CharField(max_length=64)
    params = models.TextField()
    response = models.TextField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    answered = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "MCP pending request"
        constraints = [models.UniqueConstraint(fields=["session_id", "request_id"], name="mcp_pending_unique")]
        # Waiting tools poll "answered since" once per process, not their own rows.
        indexes = [models.Index(fields=["answered"], name="mcp_pending_answered")]


class MCPElicitation(models.Model):
    """A question a tool asked a user, in either protocol era, and what became of it."""

    STATUS_CHOICES = [
        ("pending", "Pending"),
        ("accepted", "Accepted"),
        ("declined", "Declined"),
        ("cancelled", "Cancelled"),
        ("completed", "Completed"),
        ("expired", "Expired"),
    ]
    MODE_CHOICES = [("form", "Form"), ("url", "URL")]

    id = models.CharField(max_length=32, primary_key=True)
    server_name = models.CharField(max_length=200)
    tool = models.CharField(max_length=200, null=True, blank=True)
    session_id = models.CharField(max_length=64, null=True, blank=True, help_text="Legacy session that asked.")
    state_id = models.CharField(max_length=32, null=True, blank=True, help_text="2026-07-28 request state that asked.")
    request_key = models.CharField(max_length=200, help_text="Server-to-client request id, or inputRequests key.")
    principal = models.CharField(max_length=255, null=True, blank=True)
    mode = models.CharField(max_length=8, choices=MODE_CHOICES)
    message = models.TextField()
    requested_schema = models.TextField(null=True, blank=True)
    url = models.TextField(null=True, blank=True)
    elicitation_id = models.CharField(max_length=255, null=True, blank=True, db_index=True)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default="pending", db_index=True)
    answer = models.TextField(null=True, blank=True)
    detail = models.TextField(null=True, blank=True)
    owner = models.CharField(max_length=255, null=True, blank=True, help_text="Worker whose call waits.")
    stream_key = models.CharField(max_length=64, null=True, blank=True)
    call_id = models.CharField(max_length=255, null=True, blank=True, help_text="The asking call's JSON-RPC id.")
    created = models.DateTimeField()
    updated = models.DateTimeField()
    expires = models.DateTimeField()

    class Meta:
        verbose_name = "MCP elicitation"
        ordering = ["-created"]
        indexes = [
            models.Index(fields=["session_id", "request_key"], name="mcp_elicitation_request"),
            models.Index(fields=["session_id", "stream_key"], name="mcp_elicitation_stream"),
            # Both columns the redemption names: a planner without statistics (SQLite) would
            # otherwise take the status index and walk every pending row.
            models.Index(fields=["state_id", "request_key"], name="mcp_elicitation_state"),
        ]

    def __str__(self) -> str:
        return f"{self.mode} elicitation {self.elicitation_id or self.id} ({self.status})"


class MCPRequestState(models.Model):
    """A 2026-07-28 requestState behind a single-use handle."""

    state_id = models.CharField(max_length=32, primary_key=True)
    server_name = models.CharField(max_length=200)
    method = models.CharField(max_length=64)
    target = models.TextField()
    args_digest = models.CharField(max_length=64)
    principal = models.CharField(max_length=255, null=True, blank=True)
    sealed = models.TextField()
    created = models.DateTimeField()
    expires = models.DateTimeField(db_index=True)
    consumed = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "MCP request state"


class MCPWorker(models.Model):
    """A worker process's heartbeat: a call whose worker stopped beating is ended as failed."""

    worker_id = models.CharField(max_length=255, primary_key=True)
    last_beat = models.DateTimeField()

    class Meta:
        verbose_name = "MCP worker"
