"""Database helpers for hot paths."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from django.db import connection, models
from django.utils import timezone


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
    arrays = [f"%s::{pk.db_type(connection)}[]"] + [f"%s::{column_cast(c)}[]" for c in cols]
    names = ["id"] + [f"c{i}" for i in range(len(cols))]
    sets = ", ".join(f'"{c.column}" = v.c{i}' for i, c in enumerate(cols))
    sql = (
        f'UPDATE "{meta.db_table}" AS t SET {sets} FROM unnest({", ".join(arrays)}) AS v({", ".join(names)}) '
        f'WHERE t."{pk.column}" = v.id' + (f" AND {where}" if where else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(pks), *(list(v) for v in values.values()), *params])


# Fields whose Python value the driver takes as it is: preparing them through
# Field.get_db_prep_save costs more than the insert itself at thousands of rows.
_AS_IS = (
    models.BooleanField,
    models.CharField,
    models.DateTimeField,
    models.FloatField,
    models.ForeignKey,
    models.IntegerField,
    models.TextField,
)


def update_row(
    model: type[models.Model], pk, fields: dict[str, Any], *, unless: dict[str, Any] | None = None
) -> int:
    """`model.objects.filter(pk=pk).exclude(**unless).update(**fields)` for plain values,
    as one prepared statement on PostgreSQL (the ORM compiles the UPDATE anew each time:
    more Python than the database spends on it, on the heartbeat's hot path). `unless`:
    column values (not NULL) that leave the row as it is, checked on the locked row.
    Returns the rows changed."""
    unless = unless or {}
    if connection.vendor != "postgresql":
        rows = model.objects.filter(pk=pk)
        for name, value in unless.items():
            rows = rows.exclude(**{name: value})
        return rows.update(**fields)
    meta = model._meta
    cols = [meta.get_field(name) for name in fields]
    sets = ", ".join(f'"{f.column}" = %s' for f in cols)
    skip = [meta.get_field(name) for name in unless]
    where = "".join(f' AND "{f.column}" <> %s' for f in skip)
    sql = f'UPDATE "{meta.db_table}" SET {sets} WHERE "{meta.pk.column}" = %s{where}'
    values = [_prepared(f, v) for f, v in zip(cols, fields.values(), strict=True)]
    kept = [_prepared(f, v) for f, v in zip(skip, unless.values(), strict=True)]
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [*values, pk, *kept])
        return cursor.rowcount


class IfNull:
    """A value update_rows writes only where the column is still NULL: `COALESCE(column,
    value)`, what `Coalesce(F(name), Value(value))` says to the ORM."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def update_rows(model: type[models.Model], pks: Sequence, fields: dict[str, Any]) -> int:
    """`model.objects.filter(pk__in=pks).update(**fields)` for plain values (and IfNull),
    as one prepared statement on PostgreSQL: the ORM compiles the UPDATE anew each time,
    a tenth of a busy web process's CPU in the transitions of agents' reports
    (docs/benchmarks.md, "H"). Other expressions, and other databases, take the ORM.
    Returns the rows changed."""
    pks = list(pks)
    if connection.vendor != "postgresql" or any(
        hasattr(v, "resolve_expression") for v in fields.values()
    ):
        from django.db.models import F, Value
        from django.db.models.functions import Coalesce

        orm = {
            name: Coalesce(F(name), Value(v.value)) if isinstance(v, IfNull) else v
            for name, v in fields.items()
        }
        return model.objects.filter(pk__in=pks).update(**orm)
    meta = model._meta
    sets, values = [], []
    for name, value in fields.items():
        field = meta.get_field(name)
        if_null = isinstance(value, IfNull)
        value = value.value if if_null else value
        if isinstance(value, models.Model):
            value = value.pk
        column = f'"{field.column}"'
        sets.append(f"{column} = COALESCE({column}, %s)" if if_null else f"{column} = %s")
        values.append(_prepared(field, value))
    sql = f'UPDATE "{meta.db_table}" SET {", ".join(sets)} WHERE "{meta.pk.column}" = ANY(%s)'
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [*values, pks])
        return cursor.rowcount


def insert_rows(model: type[models.Model], rows: Sequence[dict[str, Any]]) -> list:
    """Insert rows given as {field name: value} in one `INSERT … SELECT FROM
    unnest(arrays)` and return their primary keys in order: what bulk_create does on
    PostgreSQL, without a model instance per row or its per-value preparation.

    A relation takes the related object (by field name) or its key (by field name or
    attribute name, `job` or `job_id`). A field the rows leave out takes
    its default, as a new instance would. Every row names the same fields. The arrays
    travel in PostgreSQL's binary format: quoting every element into text cost as much
    as the rest of the insert. A column that holds one value in every row (most
    columns of a bulk submission: its team, queue, time, the defaults) is sent once,
    as that value, and prepared once (insert_columns). PostgreSQL only.
    """
    if not rows:
        return []
    named = rows[0].keys()
    if any(row.keys() != named for row in rows):
        raise ValueError("insert_rows: every row must name the same fields")
    return insert_columns(model, len(rows), {name: [row[name] for row in rows] for name in named})


def column_cast(f: models.Field) -> str:
    """The type a hand-written statement casts a parameter of field `f` to: the column's,
    but a text's without its length. An explicit cast to varchar(n) cuts a longer text
    short without a word, where storing it in the column refuses it ("value too long"),
    as the ORM's INSERT and UPDATE do; the column's own length still applies."""
    cast = f.cast_db_type(connection)
    return cast.split("(", 1)[0] if cast.startswith("varchar(") else cast


def insert_columns(model: type[models.Model], count: int, values: dict[str, Sequence]) -> list:
    """insert_rows from the rows' values by field: `values` maps a field name (or a
    relation's attribute name) to `count` values, one a row. A column whose values are
    all the same is bound as one value (the driver dumps it once, PostgreSQL reads it
    once), the others as arrays. The same: equal (`==`) for a relation's keys and the
    fields the driver takes as they are (_AS_IS, whose equal values are stored alike),
    the same text for a JSON field, the same object for any other. PostgreSQL only."""
    if not count:
        return []
    meta = model._meta
    select, once, arrays, aliases = [], [], [], []
    for f in insert_fields(model):
        cast = column_cast(f)
        if isinstance(f, models.JSONField):  # sent as the text the driver would send
            column = _json_texts(f, count, values)
            scalar, array = f"text::{cast}", f"text[]::{cast}[]"
        else:
            column = _column(f, count, values)
            scalar, array = cast, f"{cast}[]"
        if _all_same(f, column):
            select.append(f"%b::{scalar}")
            once.append(column[0])
        else:
            aliases.append(f"c{len(arrays)}")
            select.append(f"u.{aliases[-1]}")
            arrays.append((column, array))
    if arrays:
        source = f"unnest({', '.join(f'%b::{a}' for _, a in arrays)}) AS u({', '.join(aliases)})"
        params = [*once, *(column for column, _ in arrays)]
    else:
        source, params = "generate_series(1, %b::integer)", [*once, count]
    names = ", ".join(f'"{f.column}"' for f in insert_fields(model))
    sql = (
        f'INSERT INTO "{meta.db_table}" ({names}) SELECT {", ".join(select)} FROM {source} '
        f'RETURNING "{meta.pk.column}"'
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def _column(f: models.Field, count: int, values: dict[str, Sequence]) -> list:
    """One field's values as an INSERT sends them (what row_columns does for a field),
    a value that is one object in every row prepared once."""
    name = f.name if f.name in values else f.attname if f.attname in values else None
    if name is None:
        auto = getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
        return [_prepared(f, timezone.now() if auto else f.get_default())] * count
    column = values[name]
    if len(column) != count:
        raise ValueError(f"insert_columns: {len(column)} values of {name} for {count} rows")
    if not f.is_relation and isinstance(f, _AS_IS):
        return column if type(column) is list else list(column)
    if len(set(map(id, column))) == 1:  # one object in every row
        first = column[0]
        if f.is_relation:
            return [first.pk if isinstance(first, models.Model) else first] * count
        return [f.get_db_prep_save(first, connection)] * count
    if f.is_relation:
        return [v.pk if isinstance(v, models.Model) else v for v in column]
    return [f.get_db_prep_save(v, connection) for v in column]


def _all_same(f: models.Field, column: list) -> bool:
    first = column[0]
    if f.is_relation or isinstance(f, _AS_IS) or type(first) is str:  # str: a JSON text
        return column.count(first) == len(column)
    return len(set(map(id, column))) == 1


def _json_texts(f: models.JSONField, count: int, values: dict[str, Sequence]) -> list:
    """A JSON field's values as the text the driver sends for each (JSONField prepares
    a Jsonb of the value with its encoder's dumps; NULL for None): one text for a
    column whose values are all one object, or all equal to a first value that holds
    no number (then equal values are the same JSON: True == 1 == 1.0 is no worry)."""
    if type(f) is not models.JSONField or (f.name not in values and f.attname not in values):
        return [_json_text(v) for v in _column(f, count, values)]  # Django prepares each
    column = values[f.name if f.name in values else f.attname]
    if len(column) != count:
        raise ValueError(f"insert_columns: {len(column)} values of {f.name} for {count} rows")
    first = column[0]
    if len(set(map(id, column))) == 1 or (_without_numbers(first) and column.count(first) == count):
        return [_json_text(f.get_db_prep_save(first, connection))] * count
    dumps = connection.ops.adapt_json_value(None, f.encoder).dumps or json.dumps
    return [
        None
        if v is None
        else dumps(v)
        if type(v) in _JSON_TYPES  # what the field's preparation leaves as it is
        else _json_text(f.get_db_prep_save(v, connection))
        for v in column
    ]


_JSON_TYPES = frozenset({dict, list, str, int, float, bool})


def _without_numbers(value) -> bool:
    """Whether a JSON value holds only text, null and containers of them."""
    if value is None or type(value) is str:
        return True
    if type(value) is list:
        return all(map(_without_numbers, value))
    if type(value) is dict:
        return all(type(k) is str for k in value) and all(map(_without_numbers, value.values()))
    return False


def _json_text(value) -> str | None:
    """The text of a prepared JSON value (a Jsonb wrapper, or None for NULL)."""
    if value is None:
        return None
    text = (value.dumps or json.dumps)(value.obj)
    return text.decode() if isinstance(text, bytes) else text


def row_columns(fields: Sequence[models.Field], rows: Sequence[dict[str, Any]]) -> list[list]:
    """One list per field of the rows' values as an INSERT sends them (insert_rows):
    a relation by object or key, a field left out by its default (now for
    auto_now), plain values as they are, the rest prepared by their field."""
    named = rows[0].keys()
    if any(row.keys() != named for row in rows):
        raise ValueError("insert_rows: every row must name the same fields")
    columns = []
    for f in fields:
        name = f.name if f.name in named else f.attname if f.attname in named else None
        if name is None:
            auto = getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
            columns.append([_prepared(f, timezone.now() if auto else f.get_default())] * len(rows))
            continue
        values = [row[name] for row in rows]
        if f.is_relation:
            values = [v.pk if isinstance(v, models.Model) else v for v in values]
        if not isinstance(f, _AS_IS):
            values = [f.get_db_prep_save(v, connection) for v in values]
        columns.append(values)
    return columns


def _prepared(field: models.Field, value):
    return value if isinstance(field, _AS_IS) else field.get_db_prep_save(value, connection)


def insert_fields(model: type[models.Model]) -> list[models.Field]:
    """The fields an INSERT of `model` writes: every concrete one but the primary key."""
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def server_binding_cursor():
    """A cursor that sends parameters apart from the SQL (server-side binding).

    Django's psycopg cursors bind on the client: every value is quoted into the SQL
    text in Python (for a big array, as costly as the rest of a bulk insert), and a
    statement is parsed and planned anew each time. On this cursor a statement run 5
    times on a connection is prepared (settings: DB_PREPARED_STATEMENTS), which
    halves what PostgreSQL spends on the short statements of every API request.
    Wrapped as Django wraps its own cursors, so execute wrappers and query logging
    see the statement. Elsewhere (SQLite) a plain cursor.
    """
    if connection.vendor != "postgresql":
        return connection.cursor()
    import psycopg

    connection.ensure_connection()
    return connection._prepare_cursor(psycopg.Cursor(connection.connection))


def columns(model: type[models.Model], alias: str, only: tuple[str, ...] | None = None) -> str:
    """The select list of every concrete column of `model` (or of the fields named in
    `only`, in the model's order) under table alias `alias`."""
    return ", ".join(f'{alias}."{f.column}"' for f in _fields_of(model, only))


def _fields_of(model: type[models.Model], only: tuple[str, ...] | None) -> list[models.Field]:
    fields = model._meta.concrete_fields
    return list(fields) if only is None else [f for f in fields if f.name in only]


def split_row(
    row: Sequence, *model_classes: type[models.Model] | tuple[type[models.Model], tuple[str, ...]]
) -> tuple[list[models.Model], Sequence]:
    """Build one instance per model from consecutive slices of `row` (selected with
    `columns`), as the ORM would; return them and the rest of the row. A `(model, only)`
    pair takes the fields `columns(model, alias, only)` selected, the others deferred (as
    `.only()` leaves them: read one and the ORM asks the database)."""
    instances, at = [], 0
    for model in model_classes:
        model, only = model if isinstance(model, tuple) else (model, None)
        attnames, converters = _row_shape(model, connection.vendor, only)
        values = list(row[at : at + len(attnames)])
        for i, field, convert in converters:
            values[i] = convert(values[i], field.cached_col, connection)
        instances.append(model.from_db(connection.alias, attnames, values))
        at += len(attnames)
    return instances, row[at:]


@functools.cache
def _row_shape(
    model: type[models.Model], vendor: str, only: tuple[str, ...] | None = None
) -> tuple[list[str], list[tuple]]:
    """The attribute names of `model`'s concrete fields (those in `only`, if given) and the
    conversions the ORM's compiler would apply to their values as (index, field,
    converter): the backend's first (SQLite's makes its naive datetimes aware), then the
    field's (JSON, …)."""
    fields = _fields_of(model, only)
    converters = [
        (i, f, convert)
        for i, f in enumerate(fields)
        for convert in connection.ops.get_db_converters(f.cached_col)
        + f.get_db_converters(connection)
    ]
    return [f.attname for f in fields], converters
