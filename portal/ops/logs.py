"""Log lines that name what they are about: job, team, queue, node, worker ids.

    log.info("job admitted", extra=log_fields(job=job, node=node, borrowed=4))

With BERTH_LOG_FORMAT=json (portal.logging.JsonFormatter) the fields become
keys of the line's JSON object; the text format (TextFormatter below) appends
them as `key=value`. log_fields reads only ids and names already on the objects
(`job.team_id`, never `job.team.slug`), so logging never costs a query.
"""

from __future__ import annotations

import logging

# LogRecord attributes: an `extra` key may not overwrite them (logging raises KeyError).
RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def log_fields(*, job=None, team=None, queue=None, node=None, worker=None, **more) -> dict:
    """Return an `extra=` dict with the ids of the given objects (model instances or ids).

    job → job_id (and team_id, queue_id when the instance has them); team →
    team (slug) and team_id; queue → queue_id; node → node (hostname) and
    node_id; worker → worker (its key "job.attempt.rank"), job_id and node_id.
    Other keyword arguments pass through, renamed `x_<name>` if they would
    clash with a LogRecord attribute.
    """
    fields: dict = {}
    if worker is not None:
        fields |= _worker(worker)
    if job is not None:
        fields |= _job(job)
    if team is not None:
        fields |= _named(team, "team", "slug")
    if queue is not None:
        fields["queue_id"] = getattr(queue, "pk", queue)
    if node is not None:
        fields |= _named(node, "node", "hostname")
    for key, value in more.items():
        fields[f"x_{key}" if key in RESERVED else key] = value
    return fields


def _job(job) -> dict:
    if not hasattr(job, "pk"):
        return {"job_id": job}
    out = {"job_id": job.pk}
    for attr in ("team_id", "queue_id"):
        if getattr(job, attr, None) is not None:
            out[attr] = getattr(job, attr)
    return out


def _worker(worker) -> dict:
    if not hasattr(worker, "pk"):
        return {"worker": worker}
    return {"worker": worker.key, "job_id": worker.job_id, "node_id": worker.node_id}


def _named(obj, label: str, attr: str) -> dict:
    """`node` → {"node": hostname, "node_id": pk}; a plain id or name is kept as given."""
    if hasattr(obj, "pk"):
        return {label: getattr(obj, attr), f"{label}_id": obj.pk}
    return {f"{label}_id" if isinstance(obj, int) else label: obj}


class TextFormatter(logging.Formatter):
    """The plain format, followed by the record's `extra` fields as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = {k: v for k, v in vars(record).items() if k not in RESERVED}
        if not extras:
            return line
        pairs = " ".join(f"{k}={_value(v)}" for k, v in extras.items())
        head, sep, tail = line.partition("\n")  # keep a traceback below the fields
        return f"{head} {pairs}{sep}{tail}"


def _value(value) -> str:
    text = str(value)
    return f'"{text}"' if not text or any(c in text for c in ' ="') else text
