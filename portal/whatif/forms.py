"""The what-if form: which team, which setting, which new value, which period."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.utils import timezone

from portal.core.models import GpuFlavor
from portal.whatif.models import WhatIfRun

MAX_PERIOD = timedelta(days=92)
DEFAULT_PERIOD = timedelta(days=14)


class WhatIfForm(forms.ModelForm):
    """Shared by the dashboard page and the admin; `teams` limits the team choices."""

    class Meta:
        model = WhatIfRun
        fields = ["team", "change", "flavor", "value", "period_start", "period_end"]
        widgets = {
            "period_start": forms.DateTimeInput(attrs={"type": "datetime-local"}),
            "period_end": forms.DateTimeInput(attrs={"type": "datetime-local"}),
        }
        labels = {"value": "New value"}

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.fields:  # the admin's read-only view of a run
            return
        if teams is not None:
            self.fields["team"].queryset = teams.order_by("slug")
        self.fields["flavor"].queryset = GpuFlavor.objects.order_by("name")
        self.fields["flavor"].required = False
        for name in ("period_start", "period_end"):
            field = self.fields[name]
            if isinstance(field, forms.DateTimeField):  # the admin uses split date + time
                field.input_formats = ["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"]
        if not self.is_bound and not self.instance.pk:
            end = timezone.now().replace(second=0, microsecond=0)
            self.initial.setdefault("period_end", end)
            self.initial.setdefault("period_start", end - DEFAULT_PERIOD)
            self.initial.setdefault("change", WhatIfRun.Change.NOMINAL)

    def clean(self):
        data = super().clean()
        if not self.fields:
            return data
        change, value, flavor = data.get("change"), data.get("value"), data.get("flavor")
        start, end = data.get("period_start"), data.get("period_end")
        if change == WhatIfRun.Change.WEIGHT:
            data["flavor"] = None
            if value is None or value <= 0:
                self.add_error("value", "A weight must be above 0.")
        elif change:
            if flavor is None:
                self.add_error("flavor", "Choose the GPU flavor of the quota to change.")
            if change == WhatIfRun.Change.NOMINAL and value is None:
                self.add_error("value", "Give the new nominal quota in GPUs.")
            if value is not None and (value < 0 or value != int(value)):
                self.add_error("value", "Give a whole number of GPUs, 0 or more.")
        if start and end:
            if end <= start:
                self.add_error("period_end", "The period must end after it starts.")
            elif end - start > MAX_PERIOD:
                self.add_error("period_end", f"Replay at most {MAX_PERIOD.days} days at a time.")
        return data

    def validate_constraints(self, exclude=None):
        # The form's own checks cover the model's constraints with better messages.
        return None


class WhatIfAdminForm(WhatIfForm):
    """The same checks with the admin's own date and time widgets."""

    class Meta(WhatIfForm.Meta):
        widgets = {}
