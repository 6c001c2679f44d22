"""The team-lead dashboard: server-rendered pages with htmx-polled live fragments.

Views stay thin (STYLE.md §7): they resolve the team or job through
portal.core.access, read through portal.core.reports and this package's
queries, call one action for a write, and render. See docs/dashboard.md.
"""
