"""Celery task: complete a URL-mode elicitation from a worker (``pip install mcp-django-flask[celery]``).

from mcp_django.tasks import complete_elicitation_task
complete_elicitation_task.delay("deposit-42")
"""

from __future__ import annotations

from celery import shared_task

from mcp_django.elicitation import complete_elicitation


@shared_task(name="mcp_django.complete_elicitation", ignore_result=False)
def complete_elicitation_task(elicitation_id: str, server: str | None = None) -> int:
    return complete_elicitation(elicitation_id, server)
