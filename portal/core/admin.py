"""The cluster admin's interface: quotas inline on teams with an audit trail,
node cordon / drain, job cancel, and list filters and search on every model."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from portal.core import reports
from portal.core.actions.arrays import cancel_array
from portal.core.actions.audit import record_changes, record_event
from portal.core.actions.budgets import remove_budget, set_budget
from portal.core.actions.dependencies import settle
from portal.core.actions.jobs import InvalidTransition, cancel_job
from portal.core.actions.nodes import (
    EDITABLE,
    cordon_node,
    drain_node,
    edit_node,
    issue_bootstrap_token,
    reset_node_identity,
    revoke_bootstrap_tokens,
    uncordon_node,
)
from portal.core.actions.notifications import redeliver
from portal.core.actions.tokens import check_token_scope, rescope_api_token, revoke_api_token
from portal.core.jobspec import events_problem, notify_url_problem
from portal.core.models import (
    Allocation,
    ApiToken,
    AuditEntry,
    Budget,
    Cohort,
    Delivery,
    Gpu,
    GpuFlavor,
    Job,
    JobArray,
    JobDependency,
    JobEvent,
    Membership,
    Node,
    NodeBootstrapToken,
    Queue,
    Quota,
    ReclaimBackoff,
    SchedulingPass,
    Team,
    TeamWebhook,
    Usage,
)
from portal.core.secrets import new_secret

admin.site.site_header = "Berth administration"
admin.site.site_title = "Berth admin"


def _db_values(model, pks, fields) -> dict:
    """The stored values of `fields` for these rows, before a form overwrites them."""
    rows = model.objects.filter(pk__in=list(pks)).values("pk", *fields)
    return {row.pop("pk"): row for row in rows}


class AuditedAdmin(admin.ModelAdmin):
    """Writes an AuditEntry for every change to `audited_fields`, here and in audited inlines."""

    audited_fields: tuple[str, ...] = ()

    def save_model(self, request, obj, form, change):
        before = (
            _db_values(type(obj), [obj.pk], self.audited_fields).get(obj.pk, {}) if change else {}
        )
        super().save_model(request, obj, form, change)
        _audit(request.user, obj, before, self.audited_fields, change)

    def delete_model(self, request, obj):
        record_event(actor=request.user, instance=obj, action="delete")
        super().delete_model(request, obj)

    def save_formset(self, request, form, formset, change):
        fields = getattr(formset, "audited_fields", ())
        if not fields:
            return super().save_formset(request, form, formset, change)
        model = formset.model
        changed_pks = [f.instance.pk for f in formset.forms if f.instance.pk and f.has_changed()]
        before = _db_values(model, changed_pks, fields)
        for deleted in formset.deleted_forms:
            if deleted.instance.pk:
                record_event(actor=request.user, instance=deleted.instance, action="delete")
        formset.save()
        for obj in formset.new_objects:
            _audit(request.user, obj, {}, fields, change=False)
        for obj, _names in formset.changed_objects:
            _audit(request.user, obj, before.get(obj.pk, {}), fields, change=True)


def _audit(user, obj, before, fields, change) -> None:
    """Compare foreign keys by id, as values() returns them."""
    attnames = {name: obj._meta.get_field(name).attname for name in fields}
    before = {attnames[name]: before.get(name) for name in fields}
    action = "update" if change else "create"
    record_changes(actor=user, instance=obj, before=before, fields=attnames.values(), action=action)


class AuditedInline:
    """An inline whose formset carries the fields to audit."""

    audited_fields: tuple[str, ...] = ()

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        formset.audited_fields = self.audited_fields
        return formset


class OvercommitWarning:
    """Warn on quota pages when the nominal quotas of a flavor exceed the cluster's GPUs.

    Accepted rather than refused: an admin may be adding quota ahead of new
    nodes, but should know the guarantees cannot all hold at once.
    """

    def changelist_view(self, request, extra_context=None):
        _warn_overcommit(request)
        return super().changelist_view(request, extra_context)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "GET":
            _warn_overcommit(request)
        return super().changeform_view(request, object_id, form_url, extra_context)


def _warn_overcommit(request) -> None:
    for over in reports.overcommitted_flavors():
        messages.warning(request, over.message)


class QuotaInline(AuditedInline, admin.TabularInline):
    model = Quota
    extra = 0
    fields = ("flavor", "nominal", "borrowing_limit", "lending_limit")
    audited_fields = ("flavor", "nominal", "borrowing_limit", "lending_limit")


class QueueInline(AuditedInline, admin.TabularInline):
    model = Queue
    extra = 0
    fields = (
        "name",
        "default_priority",
        "default_runtime_seconds",
        "max_runtime_seconds",
        "max_pending_jobs",
        "preemptible_default",
        "max_restarts",
    )
    audited_fields = fields


class MembershipInline(AuditedInline, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)
    audited_fields = ("user", "role")


def _audit_trail_html(entries) -> str:
    if not entries:
        return "No changes recorded yet."
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} → {}</td></tr>",
        (
            (
                e.at.strftime("%Y-%m-%d %H:%M"),
                e.actor or "system",
                e.target_repr,
                e.field or e.action,
                e.old_value,
                e.new_value,
            )
            for e in entries
        ),
    )
    return format_html(
        "<table><tr><th>When</th><th>Who</th><th>What</th><th>Field</th><th>Change</th></tr>{}</table>",
        rows,
    )


@admin.register(Team)
class TeamAdmin(OvercommitWarning, AuditedAdmin):
    list_display = ("slug", "name", "cohort", "weight", "members", "quota_summary")
    list_filter = ("cohort",)
    search_fields = ("slug", "name")
    prepopulated_fields = {"slug": ("name",)}
    readonly_fields = ("audit_trail",)
    inlines = (QuotaInline, QueueInline, MembershipInline)
    audited_fields = ("name", "weight", "cohort")

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("cohort")
            .annotate(member_count=Count("memberships", distinct=True))
            .prefetch_related("quotas__flavor")
        )

    @admin.display(ordering="member_count")
    def members(self, team):
        return team.member_count

    @admin.display(description="Quotas (nominal)")
    def quota_summary(self, team):
        return ", ".join(f"{q.flavor.name}: {q.nominal}" for q in team.quotas.all()) or "—"

    @admin.display(description="Audit trail (team, quotas, queues, members, budgets)")
    def audit_trail(self, team):
        if team.pk is None:
            return "—"
        entries = AuditEntry.objects.filter(_team_audit_filter(team)).select_related("actor")[:50]
        return _audit_trail_html(list(entries))


def _team_audit_filter(team) -> Q:
    ids = {
        "team": [team.pk],
        "quota": list(team.quotas.values_list("pk", flat=True)),
        "queue": list(team.queues.values_list("pk", flat=True)),
        "membership": list(team.memberships.values_list("pk", flat=True)),
        "budget": list(team.budgets.values_list("pk", flat=True)),
    }
    query = Q(target_type="team", target_id=str(team.pk))
    for kind, pks in ids.items():
        query |= Q(target_type=kind, target_id__in=[str(pk) for pk in pks])
    # Deleted quotas and queues no longer have ids to find; their repr names the team.
    query |= Q(
        target_type__in=["quota", "queue", "membership", "budget"],
        target_repr__startswith=f"{team.slug}/",
    )
    return query


@admin.register(Cohort)
class CohortAdmin(AuditedAdmin):
    list_display = ("name", "description", "team_count")
    search_fields = ("name", "description")
    audited_fields = ("name",)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n=Count("teams"))

    @admin.display(ordering="n", description="Teams")
    def team_count(self, cohort):
        return cohort.n


@admin.register(GpuFlavor)
class GpuFlavorAdmin(AuditedAdmin):
    list_display = ("name", "display_name", "memory_mib", "product_names")
    search_fields = ("name", "display_name")
    audited_fields = ("name", "product_names")


@admin.register(Quota)
class QuotaAdmin(OvercommitWarning, AuditedAdmin):
    list_display = ("team", "flavor", "nominal", "borrowing_limit", "lending_limit")
    list_filter = ("flavor", "team__cohort")
    search_fields = ("team__slug", "flavor__name")
    list_select_related = ("team", "flavor")
    audited_fields = ("team", "flavor", "nominal", "borrowing_limit", "lending_limit")


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    """GPU-hour budgets; every save and delete goes through actions.budgets (audited)."""

    list_display = ("team", "flavor", "period", "window_days", "soft_gpu_hours", "limit_gpu_hours")
    list_filter = ("flavor", "period")
    search_fields = ("team__slug", "flavor__name")
    list_select_related = ("team", "flavor")
    fields = ("team", "flavor", "period", "window_days", "soft_gpu_hours", "limit_gpu_hours")

    def get_readonly_fields(self, request, obj=None):
        # a budget belongs to its team and flavor: another pair is another budget
        return ("team", "flavor") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        saved = set_budget(
            obj.team,
            obj.flavor,
            acting_user=request.user,
            limit_gpu_hours=obj.limit_gpu_hours,
            soft_gpu_hours=obj.soft_gpu_hours,
            period=obj.period,
            window_days=obj.window_days,
        )
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        remove_budget(obj, acting_user=request.user)

    def delete_queryset(self, request, queryset):
        for budget in queryset:
            remove_budget(budget, acting_user=request.user)


@admin.register(Queue)
class QueueAdmin(AuditedAdmin):
    list_display = (
        "__str__",
        "default_priority",
        "max_runtime_seconds",
        "max_pending_jobs",
        "preemptible_default",
    )
    list_filter = ("team", "preemptible_default")
    search_fields = ("name", "team__slug")
    list_select_related = ("team",)
    audited_fields = QueueInline.audited_fields


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ("user", "team", "role")
    list_filter = ("role", "team")
    search_fields = ("user__username", "user__email", "team__slug")
    list_select_related = ("user", "team")
    autocomplete_fields = ("user",)
    audited_fields = ("user", "team", "role")


# What agents report of a GPU: shown, never edited (the next heartbeat would undo it).
GPU_TELEMETRY = ("utilization_pct", "memory_used_mib", "temperature_c", "power_w")
GPU_REPORTED = (
    "index",
    "uuid",
    "product_name",
    "memory_mib",
    "health",
    "health_reason",
    *GPU_TELEMETRY,
)


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    can_delete = False
    fields = GPU_REPORTED
    readonly_fields = GPU_REPORTED

    def has_add_permission(self, request, obj=None):
        return False


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=200, widget=forms.TextInput(attrs={"size": 80}))


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """Cordon, drain and identity reset ask for a reason; edits go through
    actions.nodes.edit_node, so each one is audited."""

    list_display = (
        "hostname",
        "flavor",
        "rack",
        "block",
        "state_badge",
        "cordon_reason",
        "gpu_health",
        "last_heartbeat_at",
    )
    list_filter = ("condition", "cordon", "flavor", "rack", "block")
    search_fields = ("hostname", "rack", "block")
    readonly_fields = (
        "hostname",
        "flavor",
        "condition",
        "last_heartbeat_at",
        "not_ready_since",
        "registered_at",
        "agent_version",
        "cordon",
        "previous_token",
        "audit_trail",
    )
    fields = (
        "hostname",
        "flavor",
        "rack",
        "block",
        "cordon",
        "cordon_reason",
        "condition",
        "last_heartbeat_at",
        "not_ready_since",
        "registered_at",
        "agent_version",
        "previous_token",
        "audit_trail",
    )
    inlines = (GpuInline,)
    actions = ("cordon", "drain", "uncordon", "reset_identity")

    def has_add_permission(self, request):
        return False  # nodes register themselves with a bootstrap token

    def get_queryset(self, request):
        healthy = Count("gpus", filter=Q(gpus__health=Gpu.Health.HEALTHY))
        return (
            super()
            .get_queryset(request)
            .select_related("flavor")
            .annotate(n_gpus=Count("gpus"), n_healthy=healthy)
        )

    def save_model(self, request, obj, form, change):
        changes = {name: form.cleaned_data[name] for name in EDITABLE if name in form.changed_data}
        edit_node(obj, acting_user=request.user, **changes)

    @admin.display(description="State", ordering="condition")
    def state_badge(self, node):
        return node.state

    @admin.display(description="Healthy GPUs")
    def gpu_health(self, node):
        return f"{node.n_healthy}/{node.n_gpus}"

    @admin.display(description="Previous token")
    def previous_token(self, node):
        """A rotation not yet proven by the node (docs/protocol.md, "Rotation")."""
        if not node.previous_token_hash or node.previous_token_replaced_at is None:
            return "none"
        now = timezone.now()
        left = node.previous_token_replaced_at - Node.previous_token_since(now)
        if left.total_seconds() <= 0:
            return "expired (no longer accepted)"
        ends = timezone.localtime(now + left)
        return (
            f"still accepted until {ends:%Y-%m-%d %H:%M %Z}: the node has not used the token "
            "it was given at its last rotation yet"
        )

    @admin.display(description="Audit trail (registrations, token rotations, cordons, edits)")
    def audit_trail(self, node):
        if node.pk is None:
            return "—"
        entries = AuditEntry.objects.filter(target_type="node", target_id=str(node.pk))
        return _audit_trail_html(list(entries.select_related("actor")[:50]))

    def _with_reason(self, request, queryset, action, verb, title):
        """Ask for a reason on an intermediate page, then apply `action` to each node."""
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            reason = form.cleaned_data["reason"]
            changed = sum(1 for n in queryset if action(n, acting_user=request.user, reason=reason))
            self.message_user(request, f"{verb} {changed} node(s).", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "nodes": queryset,
            "form": form,
            "action": request.POST.get("action", ""),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/core/node/reason.html", context)

    @admin.action(description="Cordon: no new jobs")
    def cordon(self, request, queryset):
        return self._with_reason(request, queryset, cordon_node, "Cordoned", "Cordon nodes")

    @admin.action(description="Drain: no new jobs, running jobs finish")
    def drain(self, request, queryset):
        return self._with_reason(request, queryset, drain_node, "Draining", "Drain nodes")

    @admin.action(description="Uncordon: schedulable again")
    def uncordon(self, request, queryset):
        changed = sum(1 for node in queryset if uncordon_node(node, acting_user=request.user))
        self.message_user(request, f"Uncordoned {changed} node(s).", messages.SUCCESS)

    @admin.action(description="Reset identity: its tokens stop, its workers are lost")
    def reset_identity(self, request, queryset):
        def reset(node, *, acting_user, reason):
            reset_node_identity(node, acting_user=acting_user, reason=reason)
            return True

        return self._with_reason(
            request, queryset, reset, "Reset the identity of", "Reset node identities"
        )


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("__str__", "uuid", "product_name", "health", "health_reason", *GPU_TELEMETRY)
    list_filter = ("health", "node__flavor", "node__rack")
    search_fields = ("uuid", "node__hostname", "product_name")
    list_select_related = ("node",)
    fields = ("node", *GPU_REPORTED, "updated_at")
    readonly_fields = fields

    def has_add_permission(self, request):
        return False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ("at", "kind", "from_state", "to_state", "actor", "message")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


class JobDependencyInline(admin.TabularInline):
    """The jobs this one depends on (its `dependency` text also says singleton)."""

    model = JobDependency
    fk_name = "child"
    extra = 0
    can_delete = False
    fields = ("type", "parent", "parent_state")
    readonly_fields = fields
    verbose_name = "dependency"

    @admin.display(description="parent state")
    def parent_state(self, edge):
        return edge.parent.state

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "name",
        "team",
        "queue",
        "state",
        "gpus_display",
        "flavor",
        "priority",
        "reason_code",
        "array_task",
        "submitted_at",
    )
    list_filter = (
        "state",
        "team",
        "flavor",
        "preemptible",
        "reason_code",
        "awaiting_dependency",
    )
    search_fields = (
        "=id",
        "=array__id",
        "name",
        "image",
        "submitted_by__username",
        "idempotency_key",
    )
    list_select_related = ("team", "queue", "flavor")
    date_hierarchy = "submitted_at"
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = (JobDependencyInline, JobEventInline)
    actions = ("cancel", "judge_dependencies")

    @admin.display(description="GPUs")
    def gpus_display(self, job):
        return f"{job.workers}×{job.gpus_per_worker}"

    @admin.display(description="Array task", ordering="array_id")
    def array_task(self, job):
        return "" if job.array_id is None else f"{job.array_id}_{job.array_index}"

    def has_add_permission(self, request):
        return False

    @admin.action(description="Cancel selected jobs")
    def cancel(self, request, queryset):
        done = 0
        for job in queryset:
            try:
                cancel_job(job, actor=request.user, reason=f"Cancelled by admin {request.user}.")
                done += 1
            except InvalidTransition:
                pass
        self.message_user(request, f"Cancelled {done} job(s).", messages.SUCCESS)

    @admin.action(description="Check the dependencies of selected held jobs now")
    def judge_dependencies(self, request, queryset):
        """What the periodic sweep does, for these jobs: release, cancel or re-word."""
        outcome = settle(list(queryset.values_list("pk", flat=True)))
        counts = ", ".join(f"{len(ids)} {name}" for name, ids in outcome.items())
        self.message_user(request, f"Held jobs checked: {counts}.", messages.SUCCESS)


@admin.register(JobArray)
class JobArrayAdmin(admin.ModelAdmin):
    """Job arrays: what was submitted and how its tasks stand; the tasks are Jobs
    (search the job list for `=array id`). Cancelling goes through actions.arrays."""

    list_display = ("id", "name", "team", "spec", "size", "task_limit", "tasks", "submitted_at")
    list_filter = ("team",)
    search_fields = ("=id", "name", "submitted_by__username", "idempotency_key")
    list_select_related = ("team",)
    date_hierarchy = "submitted_at"
    readonly_fields = [f.name for f in JobArray._meta.fields] + ["tasks"]
    actions = ("cancel",)

    def get_queryset(self, request):
        """With the tasks counted per state, in the list's one query."""
        counts = {
            f"n_{state}": Count("tasks", filter=Q(tasks__state=state)) for state in Job.State.values
        }
        return super().get_queryset(request).annotate(**counts)

    @admin.display(description="Tasks by state")
    def tasks(self, array):
        counts = [(s, getattr(array, f"n_{s}", 0)) for s in Job.State.values]
        return ", ".join(f"{n} {state}" for state, n in counts if n) or "—"

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Cancel every open task of the selected arrays")
    def cancel(self, request, queryset):
        done = 0
        for array in queryset:
            try:
                moved = cancel_array(
                    array, actor=request.user, reason=f"Cancelled by admin {request.user}."
                )
            except InvalidTransition:
                continue
            done += len(moved)
        self.message_user(request, f"Cancelled {done} task(s).", messages.SUCCESS)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "job", "kind", "from_state", "to_state", "actor", "message")
    list_filter = ("kind", "to_state")
    search_fields = ("=job__id", "message")
    list_select_related = ("job", "actor")


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ("job", "worker_rank", "node", "gpu", "active", "created_at", "released_at")
    list_filter = ("active", "node__rack")
    search_fields = ("=job__id", "node__hostname", "gpu__uuid")
    list_select_related = ("job", "node", "gpu__node")


@admin.register(Usage)
class UsageAdmin(ReadOnlyAdmin):
    list_display = ("hour", "team", "flavor", "gpu_hours")
    list_filter = ("team", "flavor")
    search_fields = ("team__slug",)
    date_hierarchy = "hour"
    list_select_related = ("team", "flavor")

    @admin.display(description="GPU-hours")
    def gpu_hours(self, usage):
        return f"{reports.gpu_hours(usage.gpu_seconds):.2f}"


@admin.register(ReclaimBackoff)
class ReclaimBackoffAdmin(ReadOnlyAdmin):
    """Teams whose borrowing of a flavor was reclaimed (BERTH_RECLAIM_BACKOFF), and until
    when they may not borrow it again."""

    list_display = ("team", "flavor", "reclaims", "last_reclaim_at", "cooling_until")
    list_filter = ("flavor",)
    search_fields = ("team__slug",)
    list_select_related = ("team", "flavor")

    @admin.display(description="May borrow again from")
    def cooling_until(self, row):
        return reports.may_borrow_from(row.reclaims, row.last_reclaim_at)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "at",
        "actor",
        "action",
        "target_type",
        "target_repr",
        "field",
        "old_value",
        "new_value",
        "note",
    )
    list_filter = ("target_type", "action", "field")
    search_fields = ("target_repr", "actor__username", "note")
    date_hierarchy = "at"
    list_select_related = ("actor",)


@admin.register(SchedulingPass)
class SchedulingPassAdmin(ReadOnlyAdmin):
    list_display = (
        "started_at",
        "policy",
        "duration_ms",
        "pending",
        "admitted",
        "preempted",
        "queries",
        "dry_run",
        "error",
    )
    list_filter = ("policy", "dry_run")
    search_fields = ("error",)


class ShownOnceTokenAdmin(admin.ModelAdmin):
    """Creates the secret on save and shows it once in a message; only its digest is stored."""

    secret_kind = ""

    def save_model(self, request, obj, form, change):
        if not change:
            secret = new_secret(self.secret_kind)
            obj.prefix, obj.token_hash = secret.prefix, secret.digest
            self._set_owner(request, obj)
            super().save_model(request, obj, form, change)
            self.message_user(
                request,
                f"Token created. Copy it now, it is not shown again: {secret.plaintext}",
                messages.WARNING,
            )
            return
        super().save_model(request, obj, form, change)

    def _set_owner(self, request, obj):
        pass

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        n = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {n} token(s).", messages.SUCCESS)


@admin.register(NodeBootstrapToken)
class NodeBootstrapTokenAdmin(admin.ModelAdmin):
    """Issued and revoked through actions.nodes (audited); its secret is shown once."""

    list_display = (
        "prefix",
        "description",
        "hostname_pattern",
        "uses",
        "max_uses",
        "created_by",
        "created_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "description", "hostname_pattern")
    fields = ("description", "hostname_pattern", "max_uses", "expires_at")
    actions = ("revoke",)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return (*self.fields, "prefix", "uses", "created_by", "created_at", "revoked_at")

    def save_model(self, request, obj, form, change):
        if change:
            return  # an issued token is not edited: revoke it and issue another
        token, plaintext = issue_bootstrap_token(
            acting_user=request.user,
            description=obj.description,
            hostname_pattern=obj.hostname_pattern,
            max_uses=obj.max_uses,
            expires_at=obj.expires_at,
        )
        obj.pk = token.pk
        self.message_user(
            request,
            f"Token created. Copy it now, it is not shown again: {plaintext}",
            messages.WARNING,
        )

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        n = revoke_bootstrap_tokens(list(queryset), acting_user=request.user)
        self.message_user(request, f"Revoked {n} token(s).", messages.SUCCESS)


class ApiTokenAdminForm(forms.ModelForm):
    """A token's scope is checked as everywhere else (actions.tokens.check_token_scope)."""

    class Meta:
        model = ApiToken
        fields = "__all__"

    def clean(self):
        data = super().clean()
        user = data.get("user") or getattr(self.instance, "user", None)
        if user is not None:
            try:
                check_token_scope(user, list(data.get("teams") or []))
            except PermissionError as exc:
                raise forms.ValidationError({"teams": str(exc)}) from None
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(ShownOnceTokenAdmin):
    secret_kind = "bat"
    form = ApiTokenAdminForm
    list_display = (
        "prefix",
        "name",
        "user",
        "scoped",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "user__username")
    fields = ("user", "name", "teams", "scoped", "expires_at", "revoked_at")
    readonly_fields = ("scoped",)
    autocomplete_fields = ("user",)
    filter_horizontal = ("teams",)
    list_select_related = ("user",)
    actions = ("revoke",)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        if "teams" in form.changed_data:  # not a token whose teams were deleted, saved again
            rescope_api_token(form.instance, acting_user=request.user)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        n = sum(revoke_api_token(token, acting_user=request.user) for token in queryset)
        self.message_user(request, f"Revoked {n} token(s).", messages.SUCCESS)


# --- notifications (portal/core/actions/notifications.py) ------------------------------


class TeamWebhookAdminForm(forms.ModelForm):
    """A webhook's URL and events are checked as everywhere else (the SSRF rule included)."""

    class Meta:
        model = TeamWebhook
        fields = ("team", "url", "events", "team_events", "description", "active")

    def clean(self):
        data = super().clean()
        if problem := notify_url_problem(data.get("url")):
            self.add_error("url", problem)
        if problem := events_problem(data.get("events")):
            self.add_error("events", problem)
        return data


@admin.register(TeamWebhook)
class TeamWebhookAdmin(AuditedAdmin):
    form = TeamWebhookAdminForm
    audited_fields = ("url", "events", "team_events", "description", "active")
    list_display = ("team", "url", "events", "team_events", "active", "created_at")
    list_filter = ("active", "team")
    search_fields = ("url", "team__slug")
    list_select_related = ("team",)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """The outbox, read-only: what was sent where, its attempts and last answer."""

    list_display = (
        "created_at",
        "team",
        "event",
        "job",
        "target",
        "state",
        "attempts",
        "last_status_code",
        "last_error",
    )
    list_filter = ("state", "channel", "event", "team")
    search_fields = ("target", "=job__id")
    list_select_related = ("team", "job")
    actions = ("send_again",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.action(description="Send the selected deliveries again")
    def send_again(self, request, queryset):
        copies = [redeliver(d, acting_user=request.user) for d in queryset]
        self.message_user(request, f"{len(copies)} delivery(ies) queued again.", messages.SUCCESS)
