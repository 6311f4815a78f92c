"""The example Django site.

Its Celery app is loaded with the site, as Celery's Django guide does, so that a task sent from
a view or ``manage.py shell`` goes to the broker in its settings (Celery is optional)."""

from __future__ import annotations

try:
    from example_project.django_site.celery import app as celery_app
except ModuleNotFoundError as exc:  # pragma: no cover - Celery not installed
    if exc.name != "celery":
        raise
    celery_app = None

__all__ = ["celery_app"]
