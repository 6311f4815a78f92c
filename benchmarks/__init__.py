"""Throughput and latency benchmarks of the MCP endpoints (``python -m benchmarks.run``)."""
