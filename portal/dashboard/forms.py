"""Forms parse what people type; portal.core.jobspec decides what a valid job is.

The submit form only turns text into typed values (a command line into argv,
KEY=VALUE lines into a dict, "4h" into seconds). Everything else is checked by
clean_job_spec, exactly as for the REST API, and its per-field errors are put
next to the form's fields, in the same round as the parse errors: the spec is
checked with whatever parsed, and a field that did not parse keeps its parse
error only.
"""

from __future__ import annotations

import shlex
import uuid

from django import forms

from portal.core import jsontext
from portal.core.access import visible_teams
from portal.core.jobspec import (
    JOB_EVENTS,
    NOTIFY_DEFAULT_ON,
    JobSpec,
    SpecError,
    clean_job_spec,
)
from portal.core.models import GpuFlavor, Team
from portal.core.validators import TOKEN_NAME
from portal.dashboard.format import parse_duration

PREEMPTIBLE_CHOICES = [("", "Queue default"), ("yes", "Yes"), ("no", "No")]
EXPIRY_CHOICES = [("30", "30 days"), ("90", "90 days"), ("365", "1 year"), ("", "Never")]


class SubmitJobForm(forms.Form):
    name = forms.CharField(max_length=200, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    queue = forms.ChoiceField()
    flavor = forms.ChoiceField(label="GPU flavor")
    image = forms.CharField(
        max_length=500, widget=forms.TextInput(attrs={"placeholder": "registry/image:tag"})
    )
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "python train.py --epochs 10"}),
        help_text='A command line (quoted like a shell) or a JSON list such as ["python", "train.py"].',
    )
    env = forms.CharField(
        required=False,
        label="Environment",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "WANDB_PROJECT=vit\nSEED=1"}),
        help_text="One KEY=VALUE per line.",
    )
    workers = forms.IntegerField(
        initial=1, help_text="Processes of the gang, usually one per node; all start together."
    )
    gpus_per_worker = forms.IntegerField(initial=1, label="GPUs per worker")
    priority = forms.IntegerField(required=False, help_text="Blank: the queue's default.")
    preemptible = forms.ChoiceField(choices=PREEMPTIBLE_CHOICES, required=False)
    max_runtime_seconds = forms.CharField(
        required=False,
        label="Max run time",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 90m, 4h, 1d"}),
        help_text="Seconds or 90m / 4h / 1d. Blank: the queue's default.",
    )
    checkpoint_signal = forms.CharField(initial="SIGTERM", max_length=16)
    grace_period_seconds = forms.IntegerField(
        initial=30, label="Grace period (s)", help_text="Between the signal and the kill."
    )
    dependency = forms.CharField(
        required=False,
        max_length=1000,
        widget=forms.TextInput(attrs={"placeholder": "e.g. afterok:12:13,singleton"}),
        help_text="Jobs of this team it waits for: afterok, afternotok, afterany or after "
        "with job ids, or singleton; several joined by commas. Blank: none.",
    )
    notify_url = forms.CharField(
        required=False,
        max_length=2000,
        label="Notify URL",
        widget=forms.TextInput(attrs={"placeholder": "https://hooks.example.com/berth"}),
        help_text="Optional: a signed JSON POST on the events ticked below.",
    )
    notify_on = forms.MultipleChoiceField(
        choices=[(e, e) for e in JOB_EVENTS],
        required=False,
        initial=NOTIFY_DEFAULT_ON,
        widget=forms.CheckboxSelectMultiple,
        label="Notify on",
    )
    notify_email = forms.BooleanField(required=False, label="E-mail me on these events")
    array = forms.CharField(
        required=False,
        max_length=2000,
        label="Job array",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 0-99%8", "autocomplete": "off"}),
        help_text="Optional: one task per index, as sbatch --array (0-99, 1,3,5-9, 0-99:4; "
        "%8: at most 8 at once). {index} in the name and command becomes the task's index.",
    )
    request_id = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args, team: Team, **kwargs):
        super().__init__(*args, **kwargs)
        self.team = team
        self.spec: JobSpec | None = None
        self.fields["queue"].choices = [
            (q.name, q.name) for q in team.queues.order_by("name").only("name")
        ]
        self.fields["flavor"].choices = [
            (f.name, f.name) for f in GpuFlavor.objects.order_by("name")
        ]
        self.fields["queue"].initial = "default"
        self.fields["request_id"].initial = uuid.uuid4().hex

    def clean_command(self) -> list[str]:
        text = self.cleaned_data["command"].strip()
        if text.startswith("["):
            try:
                argv = jsontext.loads(text)
            except jsontext.JsonError as exc:
                raise forms.ValidationError(f"Not a valid JSON list: {exc}") from None
            if not isinstance(argv, list):
                raise forms.ValidationError("Give a JSON list of strings.")
            return argv
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Could not split the command line: {exc}.") from None

    def clean_env(self) -> dict[str, str]:
        env, bad = {}, []
        for number, line in enumerate(self.cleaned_data["env"].splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                bad.append(str(number))
                continue
            env[key.strip()] = value
        if bad:
            raise forms.ValidationError(f"Line {', '.join(bad)}: write KEY=VALUE.")
        return env

    def clean_max_runtime_seconds(self) -> int | None:
        text = self.cleaned_data["max_runtime_seconds"].strip()
        if not text:
            return None
        try:
            return parse_duration(text)
        except ValueError:
            raise forms.ValidationError(
                "Write seconds, or a duration like 90m, 4h or 1d."
            ) from None

    def clean(self):
        """Check the job as the API does, so range errors arrive with the parse errors."""
        cleaned = super().clean()
        if cleaned.get("array"):
            return cleaned  # an array's tasks are checked as a whole (actions.arrays)
        try:
            self.spec = clean_job_spec(self.team, self.spec_data())
        except SpecError as exc:
            self.add_spec_errors(exc, skip=set(self.errors))
        return cleaned

    def spec_data(self) -> dict:
        """The cleaned values as clean_job_spec takes them; blanks fall back to queue defaults."""
        data = {k: v for k, v in self.cleaned_data.items() if k not in ("request_id", "array")}
        data["preemptible"] = {"yes": True, "no": False}.get(data.get("preemptible") or "")
        data["notify"] = _notify(
            data.pop("notify_url", ""), data.pop("notify_on", None), data.pop("notify_email", False)
        )
        return {k: v for k, v in data.items() if v is not None}

    def add_spec_errors(self, error: SpecError, skip: set[str] = frozenset()) -> None:
        """Put the spec's errors next to their fields, except fields in `skip`."""
        for name, messages in error.fields.items():
            if name in skip:
                continue
            field = NOTIFY_FIELDS.get(name, name)
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


# The spec's `notify.*` errors → the form's fields.
NOTIFY_FIELDS = {"notify": "notify_url", "notify.url": "notify_url", "notify.on": "notify_on"}


def _notify(url: str, on: list[str] | None, email: bool) -> dict | None:
    """The job's `notify` from the form: None unless a URL is given or e-mail ticked."""
    url = (url or "").strip()
    if not url and not email:
        return None
    return {"url": url or None, "on": list(on or []), "email": bool(email)}


class ApiTokenForm(forms.Form):
    name = forms.CharField(
        **TOKEN_NAME,
        widget=forms.TextInput(attrs={"placeholder": "e.g. ci-pipeline"}),
    )
    expires_in_days = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES,
        coerce=int,
        empty_value=None,
        required=False,
        initial="90",
        label="Expires",
    )
    teams = forms.ModelMultipleChoiceField(
        queryset=Team.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every team you belong to, now and later.",
    )
    form_id = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["teams"].queryset = visible_teams(user).order_by("slug")
        self.fields["form_id"].initial = uuid.uuid4().hex


class WebhookForm(forms.Form):
    """A team webhook; what a valid one is, is actions.notifications.create_webhook's."""

    url = forms.CharField(
        max_length=2000,
        label="URL",
        widget=forms.TextInput(attrs={"placeholder": "https://hooks.example.com/berth"}),
    )
    events = forms.MultipleChoiceField(
        choices=[(e, e) for e in JOB_EVENTS],
        required=False,
        initial=["failed", "ended"],
        widget=forms.CheckboxSelectMultiple,
        label="Job events",
        help_text="Of every job of the team.",
    )
    team_events = forms.BooleanField(
        required=False, initial=True, label="Team events (budget thresholds, …)"
    )
    description = forms.CharField(max_length=200, required=False)
