"""The MCP servers both example apps serve. Each is plain SDK code: no Django, no Flask."""
