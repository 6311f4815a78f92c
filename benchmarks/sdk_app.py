"""The SDK's own Streamable HTTP app for the bench server: ``uvicorn benchmarks.sdk_app:app``.

Default settings (legacy sessions in memory, SSE answers), mounted at ``/mcp``; its DNS-rebinding
protection admits ``127.0.0.1:*``. With several workers, legacy sessions do not work (each
worker knows only its own), so the runner reports those cells as n/a.
"""

from __future__ import annotations

from benchmarks.bench_server import mcp

app = mcp.streamable_http_app()
