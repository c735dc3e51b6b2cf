"""How an audit's trace lines are kept in `TraceLine` rows, and read back as lines.

A row holds one or more consecutive lines joined by "\\n"; its `position` is the position
of its first line. A stored report keeps all its lines in one row (`packed`); a stream
session writes one row per line as the lines come (the Live page catches up on them by
position). A trace line is one line: a line break in one is kept as a space
(`storable`). One row per audit instead of one per line (20 on the benchmark's shape)
took 10–15% off the CPU time of storing a report: fewer rows to build, insert and index.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, NamedTuple

from django.db.models import IntegerField, QuerySet, Sum, Value
from django.db.models.functions import Length, Replace

BREAK = "\n"


class Line(NamedTuple):
    position: int
    text: str


def storable(line: str) -> str:
    """`line` as a row keeps it: no line break inside."""
    return line.replace(BREAK, " ") if BREAK in line else line


def packed(lines: list[str]) -> str:
    """The text of one row holding `lines` (not empty)."""
    text = BREAK.join(lines)
    if text.count(BREAK) != len(lines) - 1:  # a line with a break of its own
        text = BREAK.join(storable(line) for line in lines)
    return text


def split_row(text: str) -> list[str]:
    """The lines one row holds."""
    return text.split(BREAK)


def lines_of(rows: Iterable[tuple[int, str]]) -> Iterator[Line]:
    """The lines of (position, text) rows in position order."""
    for position, text in rows:
        for offset, line in enumerate(split_row(text)):
            yield Line(position + offset, line)


def texts_of(rows: Iterable[tuple[Any, str]]) -> Iterator[tuple[Any, str]]:
    """(key, line) for each line of (key, text) rows: e.g. the audit id of each line."""
    for key, text in rows:
        for line in split_row(text):
            yield key, line


def line_count(rows: QuerySet) -> int:
    """How many lines the rows hold (in the database: each row's breaks, plus one)."""
    breaks = Length("text") - Length(Replace("text", Value(BREAK), Value("")))
    total = rows.aggregate(n=Sum(breaks + 1, output_field=IntegerField()))["n"]
    return int(total or 0)


def first_lines(rows: QuerySet, limit: int) -> list[Line]:
    """The first `limit` lines of an audit's rows."""
    ordered = rows.order_by("position").values_list("position", "text")[:limit]
    return list(islice(lines_of(ordered), limit))


def lines_after(rows: QuerySet, after: int, limit: int) -> list[Line]:
    """At most `limit` lines of an audit's rows after position `after`, in order: those of
    the rows that start after it, and the rest of the row it falls in."""
    before = (
        rows.filter(position__lte=after).order_by("-position").values_list("position", "text")[:1]
    )
    later = (
        rows.filter(position__gt=after).order_by("position").values_list("position", "text")[:limit]
    )
    lines = (line for line in lines_of([*before, *later]) if line.position > after)
    return list(islice(lines, limit))
