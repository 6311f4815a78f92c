"""The example shop's orders: exposed to MCP clients as tools by ``shop/mcp.py``."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Order(models.Model):
    STATUS_CHOICES = [("new", "New"), ("paid", "Paid"), ("shipped", "Shipped"), ("cancelled", "Cancelled")]

    number = models.CharField(max_length=20, unique=True)
    customer = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default="new")
    total = models.DecimalField(max_digits=10, decimal_places=2)
    placed = models.DateTimeField()
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["-placed"]

    def __str__(self) -> str:
        return f"Order {self.number}"
