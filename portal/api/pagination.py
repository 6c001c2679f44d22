"""Limit/offset pages over a stable ordering (every ordering ends with the id)."""

from rest_framework.pagination import LimitOffsetPagination


class Page(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000
