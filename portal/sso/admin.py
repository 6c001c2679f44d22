"""The admin edits group mappings through portal.sso.actions, so each change is audited."""

from django.contrib import admin

from portal.sso.actions import delete_group_mapping, save_group_mapping
from portal.sso.models import GroupMapping, SsoIdentity


@admin.register(GroupMapping)
class GroupMappingAdmin(admin.ModelAdmin):
    list_display = ("pattern", "team", "role", "note")
    list_filter = ("role", "team")
    search_fields = ("pattern", "team__slug", "note")
    list_select_related = ("team",)

    def save_model(self, request, obj, form, change):
        save_group_mapping(obj, acting_user=request.user)

    def delete_model(self, request, obj):
        delete_group_mapping(obj, acting_user=request.user)

    def delete_queryset(self, request, queryset):
        for mapping in queryset:
            delete_group_mapping(mapping, acting_user=request.user)


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    list_display = ("user", "provider", "subject", "synced_at")
    list_filter = ("provider",)
    search_fields = ("user__username", "subject")
    readonly_fields = ("groups", "synced_at")
    autocomplete_fields = ("user",)
