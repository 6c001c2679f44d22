"""Single sign-on: who signed in through which provider, and how groups become teams.

A GroupMapping row says "members of directory group G (or of any group matching the
pattern) are <role> in <team>". A MappedMembership marks a core Membership that the
sync made, so the next sync may change or remove it; memberships without one were
made by hand and are never touched by the sync.
"""

from fnmatch import fnmatchcase

from django.conf import settings
from django.db import models

from portal.core.models import Membership, Team
from portal.core.models._base import valid_choice
from portal.core.models.tenancy import MembershipRole


class GroupMapping(models.Model):
    pattern = models.CharField(
        max_length=200,
        help_text="A group name as the provider asserts it, or a pattern with * and ? "
        "(e.g. gpu-alpha-*). Matched without regard to case.",
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="group_mappings")
    role = models.CharField(
        max_length=16, choices=MembershipRole.choices, default=MembershipRole.MEMBER
    )
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["team__slug", "pattern"]
        constraints = [
            models.UniqueConstraint(
                fields=["pattern", "team"], name="one_mapping_per_pattern_team"
            ),
            valid_choice("role", MembershipRole),
        ]

    def __str__(self) -> str:
        return f"{self.pattern} → {self.team} ({self.role})"

    def matches(self, group: str) -> bool:
        return fnmatchcase(group.lower(), self.pattern.lower())


class SsoProvider(models.TextChoices):
    OIDC = "oidc", "OpenID Connect"
    LDAP = "ldap", "LDAP"


class SsoIdentity(models.Model):
    """The provider's account behind a Berth user: one per user, found by (provider, subject)."""

    Provider = SsoProvider

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    provider = models.CharField(max_length=8, choices=Provider.choices)
    subject = models.CharField(max_length=255, help_text="OIDC `sub` at the issuer, or LDAP DN.")
    issuer = models.CharField(max_length=255, blank=True)
    groups = models.JSONField(default=list, blank=True, help_text="As asserted at the last sync.")
    synced_at = models.DateTimeField(null=True, blank=True)
    deactivated_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the SSO sync deactivated the user (gone from the directory, or past "
        "the maximum age); their next sign-in reactivates them. An account deactivated "
        "by hand stays so.",
    )

    class Meta:
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "issuer", "subject"], name="one_user_per_sso_subject"
            ),
            valid_choice("provider", SsoProvider),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.provider} {self.subject})"


class MappedMembership(models.Model):
    """This membership came from a GroupMapping; the sign-in sync owns it."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="+")

    def __str__(self) -> str:
        return f"mapped: {self.membership}"
