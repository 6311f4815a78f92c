"""``python -m tests.django.tenants_site.prepare``: the shared schema migrated, then the public
tenant (``localhost``) and tenants ``a`` and ``b`` (``a.localhost``, ``b.localhost``), each
schema migrated as django-tenants creates it, and a staff user in each tenant."""

from __future__ import annotations

import django
from django.core.management import call_command


def main() -> None:
    django.setup()
    from django_tenants.utils import schema_context

    from tests.django.tenants_site.customers.models import Customer, Domain

    call_command("migrate_schemas", shared=True, interactive=False, verbosity=0)
    for schema, host in (("public", "localhost"), ("a", "a.localhost"), ("b", "b.localhost")):
        tenant = Customer.objects.create(schema_name=schema, name=schema)
        Domain.objects.create(domain=host, tenant=tenant, is_primary=True)
    for schema in ("a", "b"):
        with schema_context(schema):
            from django.contrib.auth.models import User

            User.objects.create_superuser(f"staff-{schema}", password="pw")


if __name__ == "__main__":
    main()
