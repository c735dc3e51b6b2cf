"""Fast JSON lines for exports: raw database rows spliced into JSON text.

The Audit JSON is the same (parsed) as `serializers.audit_to_dict`; JSON columns are copied
as stored instead of being decoded and encoded again, and UUID/datetime columns are
formatted from their raw values. Works with SQLite (text values) and PostgreSQL (native).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from audits.models import AnalyzerRunRecord, Annotation, AuditLinks, AuditRun, Review, TraceLine
from audits.store import link_rows
from audits.store.ordering import DEFAULT_SORT
from audits.store.queries import RESULT_FIELDS, RUN_FIELDS, after_cursor, encode_cursor_raw
from audits.store.trace_rows import texts_of

_dumps = json.JSONEncoder(ensure_ascii=False).encode
_encode_str = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) uses


def _uuid(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return str(value)
    t = str(value)
    return f"{t[:8]}-{t[8:12]}-{t[12:16]}-{t[16:20]}-{t[20:]}" if len(t) == 32 else t


def _dt(value: Any) -> str | None:
    """ISO 8601 like `datetime.isoformat()` of the aware UTC value Django would return."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return str(value).replace(" ", "T") + "+00:00"


def _raw_json(value: Any, empty: str) -> str:
    if value is None:
        return empty
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        return text if text not in ("null", "") else empty
    return _dumps(value) if value else empty


def _supplementary(analyzer_id: str, value: Any, link_row: str | None) -> str:
    """A result's stored supplementary as JSON, the links analyzer's with its audit's link
    row put back in (audits.store.link_rows)."""
    if analyzer_id == "links":
        if isinstance(value, (str, bytes)):
            text = value.decode() if isinstance(value, bytes) else value
            value = link_rows.with_links_json(text, link_row)
        else:  # a driver that decodes JSON (psycopg)
            value = link_rows.with_links(value, link_rows.link_dicts(link_row))
    return _raw_json(value, "{}")


def _s(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is str:
        return _encode_str(value)
    return _dumps(value)


def _num(value: Any) -> str:
    return "null" if value is None else repr(float(value))


def _bool(value: Any) -> str:
    return "null" if value is None else ("true" if value else "false")


def _raw(qs: QuerySet) -> list[tuple]:
    sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    with connections[qs.db].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


_DATETIME_COLUMNS = ("created_at", "started_at", "finished_at", "reviewed_at")


def _run_values(page: QuerySet[AuditRun]) -> QuerySet:
    """`RUN_FIELDS` tuples; on SQLite the datetimes as their stored text, which `_dt`
    formats directly (parsing them to datetime objects and back cost a third of the time)."""
    if connections[page.db].vendor != "sqlite":
        return page.values_list(*RUN_FIELDS)
    texts = {f"{name}_text": Cast(name, TextField()) for name in _DATETIME_COLUMNS}
    return page.annotate(**texts).values_list(
        *(f"{c}_text" if c in _DATETIME_COLUMNS else c for c in RUN_FIELDS)
    )


def export_page(
    qs: QuerySet[AuditRun], cursor: str | None, limit: int, sort: str = DEFAULT_SORT
) -> tuple[str, str | None]:
    """JSON lines of one keyset page in `sort` order and the cursor of the next one (or None)."""
    page = after_cursor(qs, cursor, sort)
    rows = _raw(_run_values(page)[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    if not rows:
        return "", None
    # The child rows of this page, selected by the page query itself (no id parameters).
    ids = page.values("id")[:limit]
    results: dict[Any, list[tuple[str, bool]]] = {}
    annotations: dict[Any, list[str]] = {}
    for a in _raw(
        Annotation.objects.filter(audit_id__in=ids)
        .order_by("result_id", "position", "id")
        .values_list(
            "result_id",
            "type",
            "label",
            "severity",
            "description",
            "evidence",
            "start",
            "end",
            "id",
        )
    ):
        annotations.setdefault(a[0], []).append(
            f'{{"id":{int(a[8])},"type":{_s(a[1])},"label":{_s(a[2])},"severity":{_s(a[3])},'
            f'"description":{_s(a[4])},"evidence":{_s(a[5])},"start":{_s(a[6])},'
            f'"end":{_s(a[7])}}}'
        )
    # each audit's link table is stored as the JSON array this writes (audits.store.link_rows)
    links: dict[Any, str] = dict(
        _raw(AuditLinks.objects.filter(audit_id__in=ids).values_list("audit_id", "rows"))
    )
    for r in _raw(
        AnalyzerRunRecord.objects.filter(audit_id__in=ids)
        .order_by("audit_id", "position", "id")
        .values_list(*RESULT_FIELDS)
    ):
        text = (
            f'{{"analyzer_id":{_s(r[2])},"category":{_s(r[3])},"score":{_num(r[4])},'
            f'"should_surface":{_bool(r[5])},'
            f'"annotations":[{",".join(annotations.get(r[0], ()))}],'
            f'"supplementary":{_supplementary(r[2], r[6], links.get(r[1]))},"status":{_s(r[7])},'
            f'"error":{_s(r[8])},"duration_ms":{_num(r[9])},"surfaced":{_bool(r[10])}}}'
        )
        results.setdefault(r[1], []).append((text, bool(r[10])))
    trace: dict[Any, list[str]] = {}
    for audit_id, line in texts_of(
        _raw(
            TraceLine.objects.filter(audit_id__in=ids)
            .order_by("audit_id", "position")
            .values_list("audit_id", "text")
        )
    ):
        trace.setdefault(audit_id, []).append(_s(line))
    reviews: dict[Any, list[str]] = {}
    for v in _raw(
        Review.objects.filter(audit_id__in=ids)
        .order_by("created_at", "id")
        .values_list(
            "audit_id",
            "id",
            "annotation_id",
            "verdict",
            "comment",
            "reviewer_name",
            "created_at",
            "is_current",
        )
    ):
        reviews.setdefault(v[0], []).append(
            f'{{"id":{int(v[1])},"annotation_id":{_s(v[2])},"verdict":{_s(v[3])},'
            f'"comment":{_s(v[4])},"reviewer":{_s(v[5])},"created_at":{_s(_dt(v[6]))},'
            f'"current":{_bool(v[7])}}}'
        )
    lines = []
    for r in rows:
        res = results.get(r[0], [])
        lines.append(
            f'{{"id":{_s(_uuid(r[0]))},"external_id":{_s(r[1])},"created_at":{_s(_dt(r[2]))},'
            f'"started_at":{_s(_dt(r[3]))},"finished_at":{_s(_dt(r[4]))},'
            f'"status":{_s(r[5])},"incomplete":{_bool(r[6])},"error":{_s(r[7] or None)},'
            f'"attempts":{int(r[8])},"rerun_of":{_s(_uuid(r[9]))},'
            f'"user_input":{_s(r[10])},"response":{_s(r[11])},'
            f'"cleaned_response":{_s(r[12])},"sources":{_raw_json(r[13], "[]")},'
            f'"metadata":{_raw_json(r[14], "{}")},"collision_key":{_s(r[15])},'
            f'"options":{_raw_json(r[16], "{}")},"threshold":{_num(r[17])},'
            f'"overall_score":{_num(r[18])},"top_score":{_num(r[21])},'
            f'"top_analyzer":{_s(r[22] or None)},"has_card":{_bool(r[19])},'
            f'"results":[{",".join(t for t, _ in res)}],'
            f'"surfaced_results":[{",".join(t for t, s in res if s)}],'
            f'"links":{links.get(r[0], "[]")},'
            f'"trace":[{",".join(trace.get(r[0], ()))}],"reviewed_at":{_s(_dt(r[20]))},'
            f'"reviews":[{",".join(reviews.get(r[0], ()))}]}}\n'
        )
    last = rows[-1]
    next_cursor = None
    if more:
        created_at, audit_id = _dt(last[2]), _uuid(last[0])
        assert created_at is not None and audit_id is not None  # both NOT NULL columns
        next_cursor = encode_cursor_raw(created_at, audit_id, sort, last[21])
    return "".join(lines), next_cursor
