"""API tokens for scripts and CI: stored hashed, shown once, scoped to teams."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.core.validators import TOKEN_NAME

from .tenancy import Team


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(**TOKEN_NAME)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    teams = models.ManyToManyField(
        Team, blank=True, related_name="+", help_text="Blank: every team the user belongs to."
    )
    # Whether `teams` narrows it. Kept apart from the rows, so that a token whose teams are
    # all deleted reaches none of them rather than every team of its user (fails closed).
    scoped = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_usable(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)
