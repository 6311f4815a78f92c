"""A Django site and a Flask app serving the same MCP servers; ``python -m example_project``."""
