"""Staff review pending elicitations (and what became of answered ones) in the Django admin."""

from __future__ import annotations

import time
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import SEARCH_VAR, ChangeList
from django.contrib.auth import get_permission_codename, get_user_model
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.text import Truncator, smart_split

from mcp_common.store import OPEN_STATUSES, SQLITE_LIKE_LIMIT, sqlite_cannot_search
from mcp_django.models import MCPElicitation
from mcp_django.tenants import in_tenant, request_tenant, tenant_prefix, within
from mcp_django.views import USER_PRINCIPAL

MAX_USERS_SEARCHED = 100
"""A search names at most this many users' questions (the users whose name contains it)."""


def _user_names(request: HttpRequest, principals: set[str | None]) -> dict[str, str]:
    """The names (``USERNAME_FIELD``) of the users among ``principals``: one query. Under
    django-tenants, those of the request's tenant (its users are in its schema)."""
    user_model = get_user_model()
    tenant = request_tenant(request)
    pks: dict[Any, str] = {}
    for stored in principals:
        principal = within(tenant, stored)
        if stored and principal and principal.startswith(USER_PRINCIPAL):
            try:
                pks[user_model._meta.pk.to_python(principal.removeprefix(USER_PRINCIPAL))] = stored
            except ValidationError:
                continue  # not a key of this user model (written under another one)
    if not pks:
        return {}
    rows = user_model._default_manager.filter(pk__in=pks).values_list("pk", user_model.USERNAME_FIELD)
    return {pks[pk]: str(name) for pk, name in rows}


def _user_principals(request: HttpRequest, search_term: str) -> list[str]:
    """The principals of the users whose name contains ``search_term``."""
    term = search_term.strip()
    if not term or "\x00" in term:
        return []
    user_model = get_user_model()
    matching = user_model._default_manager.filter(**{f"{user_model.USERNAME_FIELD}__icontains": term})
    tenant = request_tenant(request)
    pks = matching.values_list("pk", flat=True)[:MAX_USERS_SEARCHED]
    return [cast(str, in_tenant(tenant, f"{USER_PRINCIPAL}{pk}")) for pk in pks]


def _with_user_after_principal(names: list[str]) -> list[str]:
    at = names.index("principal") + 1
    return [*names[:at], "asked_by", *names[at:]]


class _NamedChangeList(ChangeList):
    """A page of questions, each knowing the name of the user it was asked of."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)  # evaluated once: the page's template reads these rows
        names = _user_names(request, {row.principal for row in rows})
        tenant = request_tenant(request)
        for row in rows:
            row.asked_of_name = names.get(row.principal or "", within(tenant, row.principal))


@admin.register(MCPElicitation)
class MCPElicitationAdmin(admin.ModelAdmin):
    # The question itself is what staff review; server and mode are filters, the rest is on
    # the question's own page.
    list_display = ("created", "tool", "question", "status", "elicitation_id", "asked_by")
    list_filter = ("status", "mode", "server_name")
    search_fields = ("id", "elicitation_id", "principal", "tool", "message", "session_id")
    date_hierarchy = "created"
    ordering = ("-created",)
    actions = ("complete_selected",)
    # Every field as stored, and the user's name beside the principal it was asked of.
    readonly_fields = _with_user_after_principal([f.name for f in MCPElicitation._meta.fields])

    @admin.display(description="Question", ordering="message")
    def question(self, obj: MCPElicitation) -> str:
        return Truncator(obj.message).chars(80)

    @admin.display(description="User", ordering="principal")
    def asked_by(self, obj: MCPElicitation) -> str | None:
        # The user's name where the principal is a user of this project, else the principal
        # as the authentication wrote it (a token's; a user deleted since); None: anonymous.
        return getattr(obj, "asked_of_name", obj.principal)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _NamedChangeList

    # PostgreSQL text cannot hold NUL, and its driver refuses to look one up (a 500): a filter,
    # a selected row or an object id with one matches nothing, as on any other database. The
    # search box is Django's, which copes.
    def get_queryset(self, request: HttpRequest) -> QuerySet[MCPElicitation]:
        queryset = super().get_queryset(request)
        tenant = request_tenant(request)
        if tenant is not None:
            # django-tenants: one table for every tenant (mcp_django.tenants); staff see theirs.
            queryset = queryset.filter(principal__startswith=tenant_prefix(tenant))
        for params in (request.GET, request.POST):
            if any("\x00" in value for name, values in params.lists() if name != SEARCH_VAR for value in values):
                return queryset.none()
        return queryset

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[MCPElicitation], search_term: str
    ) -> tuple[QuerySet[MCPElicitation], bool]:
        # SQLite refuses a LIKE pattern past its limit (a 500 page): such a search lists
        # nothing there, and says why.
        if connections[queryset.db].vendor == "sqlite" and any(
            sqlite_cannot_search(term) for term in smart_split(search_term)
        ):
            self.message_user(
                request,
                f"The search is too long: SQLite compares at most {SQLITE_LIKE_LIMIT} bytes.",
                messages.WARNING,
            )
            return queryset.none(), False
        results, duplicates = super().get_search_results(request, queryset, search_term)
        # And the questions asked of the users whose name contains the search.
        principals = _user_principals(request, search_term)
        if principals:
            results = results | queryset.filter(principal__in=principals)
        return results, duplicates

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        obj = None if "\x00" in object_id else super().get_object(request, object_id, from_field)
        if obj is not None:
            obj.asked_of_name = _user_names(request, {obj.principal}).get(
                obj.principal or "", within(request_tenant(request), obj.principal)
            )
        return obj

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        # Django's date drill-down raises on a year too large for a C long, or on the last
        # month or day of year 9999 (its end is out of range): a 500 page for a hand-edited
        # address. A bad filter, answered as Django answers the others.
        try:
            return super().get_changelist_instance(request)
        except (OverflowError, ValueError) as exc:
            if not any(name.startswith(f"{self.date_hierarchy}__") for name in request.GET):
                raise
            raise IncorrectLookupParameters(exc) from exc

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Questions are asked by tools, not typed in by staff.
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A pending question deleted here would vanish from under the conversation waiting on
        # it (a later completion finds nothing to notify), with the record of what its user
        # was asked: rows go when mcp_purge removes ended ones.
        return False

    def has_complete_permission(self, request: HttpRequest) -> bool:
        # Completing is a change (a deposit marked paid): staff who may only view the questions
        # are not offered the action. The model's change permission is the one to grant.
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{get_permission_codename('change', opts)}")

    @admin.action(
        description="Mark the selected URL elicitations completed (notifies the clients)", permissions=["complete"]
    )
    def complete_selected(self, request: HttpRequest, queryset: QuerySet[MCPElicitation]) -> None:
        from mcp_common.elicitation import complete_in_store
        from mcp_django.store import DjangoStore, overdue_rows

        # Counted first: the changelist's filters (pending only, say) are part of the queryset,
        # and the rows the completion expires would drop out of it. So have those the heartbeat
        # expired after the list was shown: they were selected all the same.
        picked = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        chosen = self.get_queryset(request).filter(Q(pk__in=queryset.values("pk")) | Q(pk__in=picked))
        expired = chosen.filter(Q(status="expired") | overdue_rows(time.time()), mode="url").count()
        # Per server and asker: another server of the site, or another user, may have asked
        # under the same id, and has not done what the selected asker did.
        asked = set(queryset.filter(mode="url").values_list("elicitation_id", "server_name", "principal"))
        # Neither an open URL question nor an expired one (counted above): a form question, or
        # one declined, cancelled or completed already.
        closed = chosen.exclude(mode="url", status__in=(*OPEN_STATUSES, "expired")).count()
        store = DjangoStore()
        moved = [
            row.id
            for eid, server, principal in sorted(asked, key=lambda a: (a[0] or "", a[1], a[2] or ""))
            if eid
            for row in complete_in_store(store, eid, server, principal)[0]
        ]
        # Each in the row's history, by whom, as any change made in the admin.
        for obj in MCPElicitation.objects.filter(pk__in=moved):
            self.log_change(request, obj, "Marked completed.")
        self.message_user(request, f"{len(moved)} elicitation(s) completed.", messages.SUCCESS)
        if closed:
            self.message_user(
                request,
                f"{closed} selected elicitation(s) were not open URL questions (form questions, or declined, "
                "cancelled or completed already): nothing to complete.",
                messages.WARNING,
            )
        # One still pending after its expiry is not completed but expired (by the completion,
        # as by the heartbeat): staff are told why, not left to wonder why the count is short.
        if expired:
            self.message_user(
                request, f"{expired} selected elicitation(s) had expired: not completed.", messages.WARNING
            )
