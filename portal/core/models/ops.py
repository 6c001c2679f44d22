"""Records of the scheduling passes, for /readyz, metrics and the admin."""

from django.db import models


class SchedulingPass(models.Model):
    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField(default=0.0)
    policy = models.CharField(max_length=32)
    pending = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    queries = models.PositiveIntegerField(default=0)
    dry_run = models.BooleanField(default=False)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at"]
        verbose_name_plural = "scheduling passes"

    def __str__(self) -> str:
        return f"pass {self.started_at:%H:%M:%S} +{self.admitted} admitted"
