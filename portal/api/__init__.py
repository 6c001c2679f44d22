"""Berth's REST API for scripts and CI pipelines (docs/api.md).

Views authorize through portal.core.access, validate through
portal.core.jobspec, write through portal.core.actions and serialize; every
4xx comes out of errors.exception_handler in one shape.
"""
