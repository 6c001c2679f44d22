"""The periodic SSO sync (Celery beat, BERTH_SSO_SYNC_INTERVAL_S)."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from portal.sso.actions import deactivate_stale_sso_users

log = logging.getLogger(__name__)


@shared_task(name="portal.sso.tasks.sso_sync", ignore_result=True)
def sso_sync() -> dict:
    """LDAP users re-read from the directory (gone or disabled there: deactivated), then
    every SSO user not synced within BERTH_SSO_MAX_AGE_S deactivated."""
    conf = settings.BERTH_SSO
    result = {"ldap_synced": 0, "ldap_deactivated": 0, "stale_deactivated": 0}
    if conf["LDAP"]:
        from portal.sso.ldap import sync_directory

        result["ldap_synced"], result["ldap_deactivated"] = sync_directory()
    if conf["MAX_AGE_S"]:
        result["stale_deactivated"] = deactivate_stale_sso_users(
            max_age=timedelta(seconds=conf["MAX_AGE_S"])
        )
    log.info("sso sync", extra=result)
    return result
