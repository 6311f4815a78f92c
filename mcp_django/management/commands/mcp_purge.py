"""``manage.py mcp_purge``: delete what MCP no longer needs (run it from cron or Celery beat)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mcp_common.store import purge_cutoff
from mcp_django.conf import mcp_settings
from mcp_django.store import DjangoStore


class Command(BaseCommand):
    help = (
        "Delete legacy sessions idle for longer than MCP['SESSION_TTL'] (with their event logs), "
        "expired request states, and answered elicitations older than --elicitation-days."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--elicitation-days",
            type=float,
            default=30.0,
            help="Keep answered, expired and completed elicitation rows this many days (default 30). "
            "Pending ones are never deleted.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        store = DjangoStore()
        now = time.time()
        try:
            cutoff = purge_cutoff(now, options["elicitation_days"])
        except ValueError as exc:
            raise CommandError(f"--elicitation-days {exc}") from None
        sessions = store.purge_expired(now - float(mcp_settings.SESSION_TTL))
        expired = store.expire_elicitations(now)
        rows = store.purge_elicitations(cutoff)
        self.stdout.write(
            f"Deleted {sessions} expired MCP session(s) and {rows} old elicitation(s); "
            f"marked {expired} overdue elicitation(s) expired."
        )
