"""The Django project under test: the bench server at ``/mcp``, a plain JSON view at ``/bare``."""
