"""WSGI entry point: ``gunicorn example_project.flask_app.wsgi:app``."""

from __future__ import annotations

from example_project.flask_app import create_app

app = create_app()
