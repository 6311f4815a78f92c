from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.django_bench.settings")
os.environ.setdefault("BENCH_DJANGO_ASYNC", "1")

from django.core.asgi import get_asgi_application

application = get_asgi_application()
