"""``manage.py mcp_purge``: delete what MCP no longer needs. Run it from cron; Celery beat runs
the task ``mcp_django.purge`` (:mod:`mcp_django.tasks`), which does the same."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mcp_django.store import purge


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
        try:
            done = purge(options["elicitation_days"], now=time.time())
        except ValueError as exc:
            raise CommandError(f"--elicitation-days {exc}") from None
        self.stdout.write(
            f"Deleted {done['sessions']} expired MCP session(s) and {done['elicitations']} old elicitation(s); "
            f"marked {done['expired']} overdue elicitation(s) expired."
        )
