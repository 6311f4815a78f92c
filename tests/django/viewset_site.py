"""A DRF ViewSet routed by a router, its actions exposed as tools (``ROOT_URLCONF`` for the
ViewSet tests of ``test_django_expose``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import permission_required, user_passes_test
from django.urls import include, path
from mcp.server import MCPServer
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAdminUser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter
from rest_framework.views import APIView

from mcp_django import view_tool
from mcp_django.views import AsyncMCPView, MCPView

mcp = MCPServer("ViewSets")


class ShelfViewSet(viewsets.ViewSet):
    """The shop's shelves."""

    renderer_classes = [JSONRenderer]
    lookup_value_regex = "[a-z]+"

    def list(self, request: Request) -> Response:
        return Response({"shelves": ["top", "bottom"], "path": request.path})

    def retrieve(self, request: Request, pk: Any = None) -> Response:
        return Response({"shelf": pk, "path": request.path})

    @action(detail=True, permission_classes=[IsAdminUser])
    def stock(self, request: Request, pk: Any = None) -> Response:
        """A shelf's stock: staff only (the action's own permission, which the router applies)."""
        return Response({"shelf": pk, "stock": 12, "path": request.path})


view_tool(mcp, ShelfViewSet.as_view({"get": "list"}), name="list_shelves")
view_tool(mcp, ShelfViewSet.as_view({"get": "retrieve"}), name="get_shelf", path_arguments={"pk": str})
view_tool(mcp, ShelfViewSet.as_view({"get": "stock"}), name="shelf_stock", path_arguments={"pk": str})
# A detail action without its path_arguments: routed, but no call can build its URL.
view_tool(mcp, ShelfViewSet.as_view({"get": "retrieve"}), name="get_shelf_unaddressed")
# Decorated by the application: the decorator applies, though the router's view has none.
staff_only = user_passes_test(lambda user: user.is_staff)
view_tool(mcp, staff_only(ShelfViewSet.as_view({"get": "list"})), name="staff_shelves")


class Till(APIView):
    """The till's takings: its URL (below) lets only clerks read them, as a URLconf may guard a
    DRF view."""

    renderer_classes = [JSONRenderer]

    def get(self, request: Request) -> Response:
        return Response({"takings": 42})


view_tool(mcp, Till, name="till")

router = DefaultRouter()
router.register("shelves", ShelfViewSet, basename="shelf")

urlpatterns = [
    path("api/", include(router.urls)),
    path("till/", permission_required("shop.change_order", raise_exception=True)(Till.as_view())),
    path("mcp-sync", MCPView.as_view(server="tests.django.viewset_site.mcp")),
    path("mcp-async", AsyncMCPView.as_view(server="tests.django.viewset_site.mcp")),
]
