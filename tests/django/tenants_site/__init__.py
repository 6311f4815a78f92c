"""A django-tenants project (schema per tenant on PostgreSQL) serving MCP per tenant.

Tenants ``a`` and ``b`` at ``a.localhost`` and ``b.localhost`` (the Host header names them;
every request goes to 127.0.0.1), the public schema at ``localhost``. ``MCP_TENANTS_PLACE``
says where ``mcp_django`` is: ``shared`` (SHARED_APPS: one set of tables, in public) or
``tenant`` (TENANT_APPS: tables in each tenant's schema)."""
