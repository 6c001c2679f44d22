"""Small helpers shared by the model modules."""

from django.db import models


def valid_choice(field: str, choices: type[models.TextChoices]) -> models.CheckConstraint:
    """A CHECK constraint that keeps an enum column inside its choices."""
    return models.CheckConstraint(
        condition=models.Q(**{f"{field}__in": choices.values}),
        name=f"%(app_label)s_%(class)s_{field}_valid",
    )


def non_negative(field: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=models.Q(**{f"{field}__gte": 0}),
        name=f"%(app_label)s_%(class)s_{field}_gte_0",
    )


def positive(field: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=models.Q(**{f"{field}__gt": 0}),
        name=f"%(app_label)s_%(class)s_{field}_gt_0",
    )
