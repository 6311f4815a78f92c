"""MCP for Django: serve an MCP server (the official SDK's ``MCPServer``) from a Django URL."""

from __future__ import annotations
