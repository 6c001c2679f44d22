"""Every multi-object write goes through a verb-named function here.

Each action is atomic, writes an audit or event row, and schedules its side
effects with transaction.on_commit (Zulip's zerver/actions pattern).
"""
