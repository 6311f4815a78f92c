"""What a legacy MCP conversation keeps between requests (the core's ``SessionStore``)."""

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
