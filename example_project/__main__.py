"""Start the example Django site or Flask app.

    python -m example_project serve --framework django|flask [--server dev|gunicorn|uvicorn]
                                    [--workers N] [--threads N] [--worker-class gthread|gevent]
                                    [--port P] [--database URL] [--no-migrate]

The database is migrated first (SQLite in ``.data/`` by default; PostgreSQL with
``--database postgresql://user@host/name``), unless ``--no-migrate`` says it is up to date
already (``migrate`` ran before, as a deployment's release step runs it). The server process
then replaces this one, so signals reach it directly.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

DJANGO_SETTINGS = "example_project.django_site.settings"
GRACEFUL_SHUTDOWN_SECONDS = 3
"""How long uvicorn lets open requests finish once told to stop; streams are then closed (a
legacy client resumes them on another worker with ``Last-Event-ID``)."""


def _migrate(framework: str) -> None:
    if framework == "django":
        import django
        from django.core.management import call_command

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", DJANGO_SETTINGS)
        django.setup()
        call_command("migrate", verbosity=0, interactive=False)
        from example_project.django_site.shop.views import seed_demo_orders

        seed_demo_orders()
    else:
        from example_project.flask_app import create_app
        from mcp_flask import migrate

        migrate(create_app())


def _executable(name: str) -> str:
    # Prefer the tool installed next to this interpreter (the project's venv).
    candidate = os.path.join(os.path.dirname(sys.executable), name)
    found = candidate if os.path.exists(candidate) else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not installed: pip install -e '.[server]'")
    return found


def _command(args: argparse.Namespace) -> list[str]:
    bind = f"{args.host}:{args.port}"
    if args.framework == "django":
        if args.server == "dev":
            return [sys.executable, "-m", "django", "runserver", bind, "--noreload", "--settings", DJANGO_SETTINGS]
        if args.server == "gunicorn":
            app = "example_project.django_site.wsgi:application"
        else:
            os.environ["MCP_EXAMPLE_ASGI"] = "1"
            return [
                _executable("uvicorn"),
                "example_project.django_site.asgi:application",
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--workers",
                str(args.workers),
                # uvicorn waits for open responses before it stops, and MCP streams stay open
                # under ASGI (a GET stream for STREAM_HOLD_SECONDS, a call waiting for its
                # client until the answer): without a bound, Ctrl-C would wait minutes.
                "--timeout-graceful-shutdown",
                str(GRACEFUL_SHUTDOWN_SECONDS),
                "--log-level",
                "warning",
                "--no-access-log",
            ]
    else:
        if args.server == "uvicorn":
            raise SystemExit("The Flask example is a WSGI app: use --server dev or --server gunicorn.")
        if args.server == "dev":
            return [
                sys.executable,
                "-m",
                "flask",
                "--app",
                "example_project.flask_app:create_app",
                "run",
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--with-threads",
                "--no-reload",
            ]
        app = "example_project.flask_app.wsgi:app"
    # gthread: a streaming SSE response holds one thread, not the whole worker (gevent: one
    # greenlet).
    concurrency = ["--threads", str(args.threads)] if args.worker_class == "gthread" else []
    return [
        _executable("gunicorn"),
        app,
        "--bind",
        bind,
        "--workers",
        str(args.workers),
        "--worker-class",
        args.worker_class,
        *concurrency,
        "--timeout",
        "120",
        "--log-level",
        "warning",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m example_project", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="migrate, then run the example app")
    serve.add_argument("--framework", choices=["django", "flask"], default="django")
    serve.add_argument("--server", choices=["dev", "gunicorn", "uvicorn"], default="dev")
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("MCP_EXAMPLE_THREADS", "16")),
        help="threads per gunicorn worker (default: MCP_EXAMPLE_THREADS, else 16)",
    )
    serve.add_argument(
        "--worker-class",
        choices=["gthread", "gevent"],
        default=os.environ.get("MCP_EXAMPLE_WORKER_CLASS", "gthread"),
        help="gunicorn's worker class (default: MCP_EXAMPLE_WORKER_CLASS, else gthread; gevent needs gevent)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--database", help="sqlite:///path or postgresql://user@host:port/name")
    serve.add_argument(
        "--no-migrate",
        action="store_true",
        help="serve the database as it is (run `migrate` first): no migration step at start",
    )
    migrate = sub.add_parser("migrate", help="create or update the example database")
    migrate.add_argument("--framework", choices=["django", "flask"], default="django")
    migrate.add_argument("--database")
    args = parser.parse_args(argv)

    if args.database:
        os.environ["MCP_EXAMPLE_DATABASE_URL"] = args.database
    if args.command == "serve":
        os.environ["MCP_EXAMPLE_WORKER_CLASS"] = args.worker_class  # read by the Django settings
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", DJANGO_SETTINGS)
    if args.command == "migrate":
        _migrate(args.framework)
        return
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.server == "dev" and args.workers != 1:
        parser.error("the dev server runs one process: use --server gunicorn for several workers")
    # Migrate in a child process: this one is about to become the server, and must not carry
    # open database connections or a started event loop into gunicorn's fork.
    if not args.no_migrate:
        subprocess.run([sys.executable, "-m", "example_project", "migrate", "--framework", args.framework], check=True)
    command = _command(args)
    url = f"http://{args.host}:{args.port}/mcp"
    print(f"MCP example ({args.framework}, {args.server}, {args.workers} worker(s)) at {url}", flush=True)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
