"""The shop's one table."""

from django.db import models


class Order(models.Model):
    email = models.CharField(max_length=191)
    total_cents = models.IntegerField()
