"""API views: authorize through portal.core.access, call one action, serialize."""
