"""Sort orders of audit lists and their keyset cursors (API list, export, dashboard).

Every order ends with `created_at` and `id`, so it is total and a cursor (the sort key of
the last row shown) gives the next page exactly: no row twice, none missed, and rows
inserted meanwhile never shift a page. Audits without a `top_score` (not complete yet)
come last in both score orders, on SQLite and PostgreSQL alike.

A cursor is URL-safe base64 of `created_at|id` for the default order (as before), and
`created_at|id|sort|score` for the others: a cursor of one order is refused by another.
"""

from __future__ import annotations

import base64
import binascii
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, Q, QuerySet

DEFAULT_SORT = "-created_at"
SORTS = ("-created_at", "created_at", "-top_score", "top_score")
SORT_LABELS = {
    "-created_at": "newest first",
    "created_at": "oldest first",
    "-top_score": "highest score first",
    "top_score": "lowest score first",
}


class InvalidCursor(ValueError):
    pass


class InvalidSort(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Cursor:
    created_at: datetime
    id: uuid.UUID
    score: float | None = None


def check_sort(sort: str | None) -> str:
    if sort in (None, ""):
        return DEFAULT_SORT
    if sort not in SORTS:
        raise InvalidSort(f"sort must be one of {', '.join(SORTS)}")
    return sort


def encode(sort: str, created_at_iso: str, run_id: Any, score: float | None = None) -> str:
    raw = f"{created_at_iso}|{run_id}"
    if sort != DEFAULT_SORT:
        raw += f"|{sort}|{'' if score is None else repr(float(score))}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def encode_row(sort: str, run: Any) -> str:
    """The cursor after `run` (a model instance or a `.values()` dict)."""
    get: Callable[[str], Any] = (
        run.get if isinstance(run, dict) else lambda name: getattr(run, name)
    )
    score = get("top_score") if "top_score" in sort else None
    return encode(sort, get("created_at").isoformat(), get("id"), score)


def decode(sort: str, cursor: str) -> Cursor:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        parts = base64.urlsafe_b64decode(padded.encode()).decode().split("|")
        when = datetime.fromisoformat(parts[0])
        if when.tzinfo is None:
            raise ValueError("naive")
        run_id = uuid.UUID(parts[1])
        if sort == DEFAULT_SORT:
            if len(parts) != 2:
                raise ValueError("a cursor of another sort")
            return Cursor(when, run_id)
        if len(parts) != 4 or parts[2] != sort:
            raise ValueError("a cursor of another sort")
        score = float(parts[3]) if parts[3] else None
        if score is not None and not math.isfinite(score):
            raise ValueError("score")
        return Cursor(when, run_id, score)
    except (ValueError, IndexError, binascii.Error, UnicodeError) as exc:
        raise InvalidCursor("invalid cursor (or a cursor of another sort)") from exc


def order(qs: QuerySet, sort: str) -> QuerySet:
    if sort == "-created_at":
        return qs.order_by("-created_at", "-id")
    if sort == "created_at":
        return qs.order_by("created_at", "id")
    if sort == "-top_score":
        return qs.order_by(F("top_score").desc(nulls_last=True), "-created_at", "-id")
    return qs.order_by(F("top_score").asc(nulls_last=True), "created_at", "id")


def _after_time(c: Cursor, descending: bool) -> Q:
    if descending:
        return Q(created_at__lt=c.created_at) | Q(created_at=c.created_at, id__lt=c.id)
    return Q(created_at__gt=c.created_at) | Q(created_at=c.created_at, id__gt=c.id)


def after(qs: QuerySet, sort: str, cursor: str | None) -> QuerySet:
    """`qs` in `sort` order, from the row after `cursor` (None: from the start)."""
    qs = order(qs, sort)
    if not cursor:
        return qs
    c = decode(sort, cursor)
    descending = sort.startswith("-")
    if sort.endswith("created_at"):
        # `created_at <= X AND (...)` lets the database range-scan the created_at index
        # (a bare OR makes SQLite scan from the newest row on every page).
        bound = Q(created_at__lte=c.created_at) if descending else Q(created_at__gte=c.created_at)
        return qs.filter(bound).filter(_after_time(c, descending))
    if c.score is None:  # already among the audits without a score (they come last)
        return qs.filter(top_score__isnull=True).filter(_after_time(c, descending))
    beyond = Q(top_score__lt=c.score) if descending else Q(top_score__gt=c.score)
    return qs.filter(
        beyond | Q(top_score__isnull=True) | (Q(top_score=c.score) & _after_time(c, descending))
    )
