"""Many rows in one statement, without building a model instance per row.

`bulk_create` prepares every field of every row through the ORM (a model instance, then
`pre_save`, `get_db_prep_save` and a placeholder group per field and row): storing the
report of one audit of the benchmark's shape (6 results, 18 annotations, 18 links, 20 trace
lines) cost more CPU than analysing it. `insert_rows` takes plain tuples, converts only the
columns whose type needs it (JSON, UUIDs, dates; the same value twice in a row is converted
once, e.g. the audit id of one report's lines) and writes them in multi-row INSERTs (up to
`MAX_ROWS_PER_INSERT` rows, within the database's limit of parameters). Not `executemany`:
on SQLite it steps the statement once per row and hands the interpreter lock back and forth
each time, so a writer holding SQLite's write lock waited for the lock of the interpreter
once per row behind every busy thread of the server (docs/contributing/performance.md).
Portable SQL: SQLite and PostgreSQL; on PostgreSQL the INSERTs are a COPY.

Columns left out get the field's default, computed once per call (so a callable default
such as `timezone.now` gives every row the same value: pass such columns explicitly when
that matters). No signals are sent, as with `bulk_create`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import connections, router
from django.db.models import Model

# Field types whose Python values the drivers take as they are (str, int, float, bool, None).
_PLAIN = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "FloatField",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallIntegerField",
        "TextField",
    }
)


def converter(field, connection):
    """A function turning one Python value of `field` into the driver's value (None: the
    driver takes the Python value as it is)."""
    target = field.target_field if field.is_relation else field
    if target.get_internal_type() in _PLAIN:
        return None
    last: list[Any] = [object(), None]  # (value, converted): runs of one value convert once

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if value is last[0]:
            return last[1]
        converted = field.get_db_prep_save(value, connection)
        last[0], last[1] = value, converted
        return converted

    return convert


MAX_ROWS_PER_INSERT = 500  # rows in one INSERT statement (a bounded SQL text)


@dataclass(frozen=True)
class Statement:
    """A statement ready to run for each row: its SQL and the driver's values of each row
    (lists, so a column may still be filled in, e.g. ids known only inside the transaction).

    `row_group`: the placeholders of one row, "(%s, …)"; the rows then go in multi-row
    statements, `sql` + the rows' groups + `tail` (`sql` ends with "VALUES "). Without it,
    `sql` runs once per row (`executemany`)."""

    sql: str
    rows: list[list[Any]]
    using: str
    row_group: str | None = None
    tail: str = ""
    copy_sql: str | None = None  # the same rows by COPY, on PostgreSQL
    # On PostgreSQL, every row in one statement taking each column as an array (one
    # placeholder per column, unnest()'d), instead of a statement per row.
    columns_sql: str | None = None

    def with_rows(self, rows: list[list[Any]]) -> Statement:
        return replace(self, rows=rows)


def row_group(columns: int) -> str:
    """One row's placeholders in a multi-row statement: "(%s, %s, …)"."""
    return f"({', '.join(['%s'] * columns)})"


def prepare_insert(
    model: type[Model],
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    using: str | None = None,
    prepared: Collection[str] = (),
) -> Statement:
    """The INSERT of `rows` (tuples of Python values, in the order of `columns`, field
    names or attnames like `audit_id`) into `model`'s table, converted for the driver but
    not run: a writer converts its rows before it takes the database's write lock. The
    primary key is left to the database unless it is one of `columns`. The `prepared`
    columns hold the driver's values already (`db_value`: e.g. an audit id converted once
    per audit, not once per row of each table)."""
    db = using or router.db_for_write(model)
    connection = connections[db]
    meta = model._meta
    fields = [meta.get_field(name) for name in columns]
    given = {field.attname for field in fields}
    if meta.pk.attname not in given and meta.pk is not meta.auto_field:
        raise ValueError(f"{model.__name__}: pass the primary key (it has no database default)")
    rest = [
        field
        for field in meta.concrete_fields
        if field.attname not in given and field is not meta.auto_field
    ]
    defaults = [field.get_db_prep_save(field.get_default(), connection) for field in rest]
    converters = [
        None if name in prepared else converter(field, connection)
        for name, field in zip(columns, fields, strict=True)
    ]
    pairs = [(i, c) for i, c in enumerate(converters) if c is not None]
    values = []
    for row in rows:
        row = list(row)
        for i, convert in pairs:
            row[i] = convert(row[i])
        values.append(row + defaults if defaults else row)
    names = [field.column for field in fields] + [field.column for field in rest]
    quote = connection.ops.quote_name
    target = f"{quote(meta.db_table)} ({', '.join(quote(n) for n in names)})"
    return Statement(
        f"INSERT INTO {target} VALUES ",
        values,
        db,
        row_group=row_group(len(names)),
        copy_sql=f"COPY {target} FROM STDIN",
    )


def run_statement(statement: Statement) -> int:
    """Run a prepared statement; returns how many rows. Rows of a `row_group` go in as few
    multi-row statements as the database's limit of parameters allows (at most
    `MAX_ROWS_PER_INSERT` rows each)."""
    rows = statement.rows
    if not rows:
        return 0
    connection = connections[statement.using]
    with connection.cursor() as cursor:
        if statement.copy_sql and connection.vendor == "postgresql":
            _copy(connection, cursor.cursor, statement.copy_sql, rows)
            return len(rows)
        if statement.columns_sql and connection.vendor == "postgresql":
            cursor.execute(
                statement.columns_sql, [list(column) for column in zip(*rows, strict=True)]
            )
            return len(rows)
        if statement.row_group is None:
            cursor.executemany(statement.sql, rows)
            return len(rows)
        limit = connection.features.max_query_params or MAX_ROWS_PER_INSERT * len(rows[0])
        per = max(1, min(MAX_ROWS_PER_INSERT, limit // len(rows[0])))
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            cursor.execute(
                statement.sql + ", ".join([statement.row_group] * len(chunk)) + statement.tail,
                [value for row in chunk for value in row],
            )
    return len(rows)


def _copy(connection: Any, cursor: Any, sql: str, rows: list[list[Any]]) -> None:
    """psycopg's COPY: no SQL text with a placeholder per value for the driver to parse
    (its parse of a long multi-row INSERT cost more than the insert). Errors are Django's
    (an IntegrityError stays one), and the COPY counts as one query where queries are
    logged, as a statement run through Django's cursor does."""
    started = time.monotonic()
    with connection.wrap_database_errors, cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)
    if connection.queries_logged:
        took = time.monotonic() - started
        connection.queries_log.append({"sql": f"{sql} ({len(rows)} rows)", "time": f"{took:.3f}"})


def insert_rows(
    model: type[Model], columns: Sequence[str], rows: Iterable[Sequence[Any]], **options: Any
) -> int:
    """INSERT `rows` now (`prepare_insert` with its `using` and `prepared`, then
    `run_statement`); returns how many."""
    return run_statement(prepare_insert(model, columns, rows, **options))


def db_value(model: type[Model], name: str, value: Any, *, using: str | None = None) -> Any:
    """`value` of field `name` of `model` as the driver takes it (for `prepared` columns)."""
    connection = connections[using or router.db_for_write(model)]
    return model._meta.get_field(name).get_db_prep_save(value, connection)
