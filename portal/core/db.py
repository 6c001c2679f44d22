"""Database helpers for hot paths."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, models


def bulk_set(
    model: type[models.Model],
    objs: Sequence[models.Model],
    fields: Sequence[str],
    *,
    where: str = "",
    params=(),
) -> None:
    """Write `fields` of many rows in one statement.

    Django's bulk_update builds a CASE expression per row and field, which costs
    seconds of Python at thousands of rows. On PostgreSQL this sends one
    `UPDATE … FROM unnest(array, …)` instead; elsewhere it falls back to
    bulk_update. `where` is extra SQL on the target alias `t` (with `params`),
    e.g. "t.state = %s" to leave rows that changed meanwhile alone.
    """
    if not objs:
        return
    if connection.vendor != "postgresql":
        queryset = model.objects.all()
        if where:
            queryset = queryset.extra(
                where=[where.replace("t.", f"{model._meta.db_table}.")], params=list(params)
            )
        queryset.bulk_update(objs, list(fields), batch_size=500)
        return
    cols = [model._meta.get_field(name) for name in fields]
    bulk_set_values(
        model,
        [o.pk for o in objs],
        {
            c.name: [c.get_db_prep_save(getattr(o, c.attname), connection) for o in objs]
            for c in cols
        },
        where=where,
        params=params,
    )


def bulk_set_values(
    model: type[models.Model],
    pks: Sequence,
    values: dict[str, Sequence],
    *,
    where: str = "",
    params=(),
) -> None:
    """bulk_set from columns of values the driver adapts as they are (str, int, aware
    datetime, None), without a model instance per row: `values` maps a field name to
    one value per primary key. PostgreSQL only."""
    meta = model._meta
    cols = [meta.get_field(name) for name in values]
    pk = meta.pk
    arrays = [f"%s::{pk.db_type(connection)}[]"] + [f"%s::{c.db_type(connection)}[]" for c in cols]
    names = ["id"] + [f"c{i}" for i in range(len(cols))]
    sets = ", ".join(f'"{c.column}" = v.c{i}' for i, c in enumerate(cols))
    sql = (
        f'UPDATE "{meta.db_table}" AS t SET {sets} FROM unnest({", ".join(arrays)}) AS v({", ".join(names)}) '
        f'WHERE t."{pk.column}" = v.id' + (f" AND {where}" if where else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(pks), *(list(v) for v in values.values()), *params])


def columns(model: type[models.Model], alias: str) -> str:
    """The select list of every concrete column of `model` under table alias `alias`."""
    return ", ".join(f'{alias}."{f.column}"' for f in model._meta.concrete_fields)


def split_row(
    row: Sequence, *model_classes: type[models.Model]
) -> tuple[list[models.Model], Sequence]:
    """Build one instance per model from consecutive slices of `row` (selected with
    `columns`), as the ORM would; return them and the rest of the row."""
    instances, at = [], 0
    for model in model_classes:
        fields = model._meta.concrete_fields
        values = [_converted(f, v) for f, v in zip(fields, row[at : at + len(fields)], strict=True)]
        instances.append(model.from_db(connection.alias, [f.attname for f in fields], values))
        at += len(fields)
    return instances, row[at:]


def _converted(field, value):
    """Apply the field's own conversions (JSON decoding, …) that the ORM's compiler would."""
    for convert in field.get_db_converters(connection):
        value = convert(value, field.cached_col, connection)
    return value
