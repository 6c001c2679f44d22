"""Who changed which quota, weight or limit, when, from what to what."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=32, help_text="create, update, delete, cordon, …")
    target_type = models.CharField(max_length=32)
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=200)
    field = models.CharField(max_length=64, blank=True)
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit trail"
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]

    def __str__(self) -> str:
        change = f"{self.field}: {self.old_value} → {self.new_value}" if self.field else self.action
        return f"{self.target_repr} {change}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not kwargs.get("force_insert"):
            raise ValueError("AuditEntry is append-only")
        super().save(*args, **kwargs)
