"""The example project's Celery app: Redis as the broker, tasks found in installed apps
(``mcp_django.tasks.complete_elicitation_task`` among them).

    celery -A example_project.django_site.celery worker
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.django_site.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["mcp_django"])
