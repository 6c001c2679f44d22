from django.apps import AppConfig


class WhatIfConfig(AppConfig):
    name = "portal.whatif"
    label = "whatif"
    verbose_name = "What-if planning"
    default_auto_field = "django.db.models.BigAutoField"
