"""Every way in stores its audits here: a pending run per response, in one transaction,
its analysis queued on commit (audits.execution.queueing), keyword-only functions.

- `submit_audit(...)` stores one run; `submit_audits(...)` a batch in one insert;
  `submit_audits_once(...)` checks external ids first (a retry returns the stored run).
- `rerun_audit(run)` submits a copy with the current configuration.
- `announce(run_ids)` shows the new cards at once on the live feed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import IntegrityError, transaction

from analyzers.config_store import load_config_with_snapshot
from analyzers.engine.contract import Source
from audits.events import (
    ALL_AUDITS_GROUP,
    has_watchers,
    publish_many,
)
from audits.execution import queueing
from audits.intake.redaction import redact_item, stored_redaction
from audits.models import (
    AuditRun,
)
from audits.store.bulk import (
    Statement,
    prepare_insert,
    run_statement,
)

logger = logging.getLogger(__name__)


class ExternalIdConflict(Exception):
    """The external_id is already used by this key with a different request body."""

    def __init__(self, existing: AuditRun):
        self.existing = existing
        super().__init__(f"external_id {existing.external_id!r} was used with a different body")


def request_fingerprint(
    *,
    user_input: str,
    response: str,
    sources: list[dict[str, Any]],
    metadata: dict[str, Any],
    collision_key: str | None,
    options: dict[str, Any],
) -> str:
    """SHA-256 of the canonical request body (what makes two submissions "the same")."""
    body = {
        "user_input": user_input,
        "response": response,
        "sources": sources,
        "metadata": metadata,
        "collision_key": collision_key,
        "options": options,
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _stored_fingerprint(external_id: str | None, **body: Any) -> str:
    """The `request_hash` to store: the body's `request_fingerprint` for an audit with an
    `external_id`, "" without one (only a retry with the same external_id compares it)."""
    return "" if external_id is None else request_fingerprint(**body)


def _existing_or_conflict(*, api_key: Any, external_id: str, fingerprint: str) -> AuditRun | None:
    existing = AuditRun.objects.filter(api_key=api_key, external_id=external_id).first()
    if existing is not None and existing.request_hash != fingerprint:
        raise ExternalIdConflict(existing)
    return existing


def submit_audit(
    *,
    user_input: str,
    response: str,
    sources: list[dict[str, Any]] | None = None,
    metadata: dict[str, Any] | None = None,
    external_id: str | None = None,
    collision_key: str | None = None,
    options: dict[str, Any] | None = None,
    api_key: Any = None,
    incomplete: bool = False,
    rerun_of: AuditRun | None = None,
    enqueue: bool = True,
) -> AuditRun:
    """Store a pending run (one transaction) and enqueue its analysis on commit.

    With an `external_id`, the same key and body return the stored run (`was_created` is
    False); another body raises ExternalIdConflict. Concurrent duplicates are resolved by
    the unique constraint.
    """
    sources = [Source.model_validate(s).model_dump() for s in sources or []]
    metadata = dict(metadata or {})
    options = dict(options or {})
    fingerprint = _stored_fingerprint(
        external_id,
        user_input=user_input,
        response=response,
        sources=sources,
        metadata=metadata,
        collision_key=collision_key,
        options=options,
    )
    if external_id is not None:
        existing = _existing_or_conflict(
            api_key=api_key, external_id=external_id, fingerprint=fingerprint
        )
        if existing is not None:
            existing.was_created = False
            return existing

    config, snapshot = load_config_with_snapshot()
    redact = stored_redaction(config)
    if redact is not None:  # before the first write (the fingerprint is of the original)
        redacted = redact_item(
            {
                "user_input": user_input,
                "response": response,
                "sources": sources,
                "metadata": metadata,
            },
            redact,
        )
        user_input, response, sources, metadata = (
            redacted["user_input"],
            redacted["response"],
            redacted["sources"],
            redacted["metadata"],
        )
    run = AuditRun(
        api_key=api_key,
        external_id=external_id,
        request_hash=fingerprint,
        user_input=user_input,
        response=response,
        cleaned_response="",
        sources=sources,
        metadata=metadata,
        collision_key=collision_key,
        options=options,
        threshold=config.threshold,
        config_snapshot=snapshot,
        incomplete=incomplete,
        rerun_of=rerun_of,
    )
    insert = _runs_insert([run])
    try:
        with transaction.atomic():
            _insert_runs([run], insert)
            if enqueue:
                run_id, large = run.pk, queueing.is_large(response)
                transaction.on_commit(lambda: announce([run_id]))
                if queueing.queue_shares_transaction(run._state.db):
                    # A database queue in the same database: the task row commits with
                    # the run (one write transaction, and never one without the other).
                    queueing.insert_queue_rows([(run_id, large)])
                else:
                    transaction.on_commit(lambda: _after_submit(run_id, large))
    except IntegrityError:
        if external_id is None:
            raise
        existing = _existing_or_conflict(
            api_key=api_key, external_id=external_id, fingerprint=fingerprint
        )
        if existing is None:
            raise
        existing.was_created = False
        return existing
    run.was_created = True
    return run


def submit_audits_once(
    items: list[dict[str, Any]], *, api_key: Any = None
) -> list[AuditRun | ExternalIdConflict]:
    """`submit_audits` for audits with an `external_id` (and optionally `rerun_of`): the
    ids this key already used are found with one query per 500 and returned as stored
    (`was_created` False), or as an ExternalIdConflict in the item's place when the body
    differs; the new ones are stored together by `submit_audits`. An id twice in `items`
    is one audit. A concurrent duplicate (the unique constraint) sends the items through
    `submit_audit` one by one."""
    fingerprints = [
        request_fingerprint(
            user_input=item["user_input"],
            response=item["response"],
            sources=[Source.model_validate(x).model_dump() for x in item.get("sources") or []],
            metadata=dict(item.get("metadata") or {}),
            collision_key=item.get("collision_key"),
            options=dict(item.get("options") or {}),
        )
        for item in items
    ]
    ids = [item["external_id"] for item in items]
    existing: dict[str, AuditRun] = {}
    for start in range(0, len(ids), 500):
        for run in AuditRun.objects.filter(
            api_key=api_key, external_id__in=ids[start : start + 500]
        ):
            existing[run.external_id] = run
    out: list[Any] = [None] * len(items)
    new: dict[str, int] = {}  # external_id -> index of its first item
    for i, (external_id, fingerprint) in enumerate(zip(ids, fingerprints, strict=True)):
        stored = existing.get(external_id)
        if stored is not None:
            if stored.request_hash != fingerprint:
                out[i] = ExternalIdConflict(stored)
            else:
                stored.was_created = False
                out[i] = stored
        elif external_id not in new:
            new[external_id] = i
    if new:
        try:
            runs = submit_audits(
                [items[i] for i in new.values()],
                api_key=api_key,
                fingerprints=[fingerprints[i] for i in new.values()],
            )
        except IntegrityError:
            return [_submit_one(item, api_key) for item in items]
        for i, run in zip(new.values(), runs, strict=True):
            out[i] = run
    for i, external_id in enumerate(ids):  # the repeats of an id new in this batch
        if out[i] is None:
            first = out[new[external_id]]
            if first.request_hash != fingerprints[i]:
                out[i] = ExternalIdConflict(first)
            else:
                out[i] = copy.copy(first)
                out[i].was_created = False
    return out


def _submit_one(item: dict[str, Any], api_key: Any) -> AuditRun | ExternalIdConflict:
    try:
        return submit_audit(
            user_input=item["user_input"],
            response=item["response"],
            sources=item.get("sources"),
            metadata=item.get("metadata"),
            external_id=item.get("external_id"),
            collision_key=item.get("collision_key"),
            options=item.get("options"),
            api_key=api_key,
            incomplete=bool(item.get("incomplete", False)),
            rerun_of=item.get("rerun_of"),
        )
    except ExternalIdConflict as exc:
        return exc


def submit_audits(
    items: list[dict[str, Any]],
    *,
    api_key: Any = None,
    fingerprints: list[str] | None = None,
) -> list[AuditRun]:
    """`submit_audit` for several audits (a batch request): one transaction and one insert
    for all, each enqueued on commit. An `external_id` is stored as given, unchecked:
    `submit_audits_once` checks them first (and hands over the `fingerprints` it made)."""
    config, snapshot = load_config_with_snapshot()
    redact = stored_redaction(config)
    rows = []
    for i, item in enumerate(items):
        sources = [Source.model_validate(x).model_dump() for x in item.get("sources") or []]
        metadata = dict(item.get("metadata") or {})
        options = dict(item.get("options") or {})
        fingerprint = (
            fingerprints[i]
            if fingerprints is not None
            else _stored_fingerprint(
                item.get("external_id"),
                user_input=item["user_input"],
                response=item["response"],
                sources=sources,
                metadata=metadata,
                collision_key=item.get("collision_key"),
                options=options,
            )
        )
        rerun_of = item.get("rerun_of")
        if redact is not None:  # before the first write (the fingerprint is of the original)
            item = redact_item({**item, "sources": sources, "metadata": metadata}, redact)
            sources, metadata = item["sources"], item["metadata"]
        rows.append(
            (
                item.get("external_id"),
                None if rerun_of is None else rerun_of.pk,
                None if api_key is None else api_key.pk,
                fingerprint,
                item["user_input"],
                item["response"],
                sources,
                metadata,
                item.get("collision_key"),
                options,
                config.threshold,
                snapshot,
                bool(item.get("incomplete", False)),
            )
        )
    runs, values = _new_runs(_SUBMITTED_COLUMNS, rows)
    for item, run in zip(items, runs, strict=True):
        if item.get("rerun_of") is not None:
            _RERUN_OF.set_cached_value(run, item["rerun_of"])
        if api_key is not None:
            _API_KEY.set_cached_value(run, api_key)
    insert = _runs_insert(runs, values)
    with transaction.atomic():
        _insert_runs(runs, insert)
        queued = [(run.pk, queueing.is_large(run.response)) for run in runs]
        transaction.on_commit(lambda: announce([run_id for run_id, _ in queued]))
        if runs and queueing.queue_shares_transaction(runs[0]._state.db):
            queueing.insert_queue_rows(queued)
        else:
            transaction.on_commit(lambda: queueing.enqueue_audits(queued))
    for run in runs:
        run.was_created = True
    return runs


_SUBMITTED_COLUMNS = (
    "external_id",
    "rerun_of_id",
    "api_key_id",
    "request_hash",
    "user_input",
    "response",
    "sources",
    "metadata",
    "collision_key",
    "options",
    "threshold",
    "config_snapshot",
    "incomplete",
)
_RERUN_OF = AuditRun._meta.get_field("rerun_of")
_API_KEY = AuditRun._meta.get_field("api_key")


def _new_runs(
    columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> tuple[list[AuditRun], list[list[Any]]]:
    """`AuditRun(**dict(zip(columns, row)))` for each row (`columns`: attnames), through
    the model's positional path: each field set by its place, not looked up by name (half
    the CPU of the keyword path, which was a third of storing a batch request). Fields
    not in `columns` get their defaults, callable ones (the id, `created_at`) called for
    each run. Returns the runs and their values in field order (`_runs_insert`)."""
    fields = AuditRun._meta.concrete_fields
    place = {field.attname: i for i, field in enumerate(fields)}
    given = [place[name] for name in columns]
    defaults = [
        (i, field.get_default) for i, field in enumerate(fields) if field.attname not in columns
    ]
    runs, full = [], []
    for values in rows:
        row: list[Any] = [None] * len(fields)
        for i, default in defaults:
            row[i] = default()
        for i, value in zip(given, values, strict=True):
            row[i] = value
        runs.append(AuditRun(*row))
        full.append(row)
    return runs, full


def _runs_insert(runs: list[AuditRun], values: list[list[Any]] | None = None) -> Statement:
    """The INSERT of new runs as plain rows, one statement (audits.store.bulk), converted before
    the transaction (its write lock holds every other writer): `save()` and the ORM's
    bulk_create prepared each of the ~30 fields of each run one by one. No signals are
    sent (nothing listens to an AuditRun's save). `values`: the runs' field values in the
    model's order, when known (`_new_runs`)."""
    columns = [field.attname for field in AuditRun._meta.concrete_fields]
    if values is None:
        values = [[getattr(run, name) for name in columns] for run in runs]
    return prepare_insert(AuditRun, columns, values)


def _insert_runs(runs: list[AuditRun], statement: Statement) -> None:
    """Run the INSERT `_runs_insert(runs)` built; the runs are stored ones from now."""
    run_statement(statement)
    for run in runs:
        run._state.adding = False
        run._state.db = statement.using


def _after_submit(run_id: Any, large: bool = False) -> None:
    queueing.enqueue_audit(run_id, large=large)


def announce(run_ids: list[Any]) -> None:
    """`audit_submitted` for new runs, so that their cards show at once even when the
    queue is deep ("audit_started" may be seconds away). Nothing is sent when nobody
    watches the feed (in-memory layer; on Redis one question for the batch), and the live
    feed renders a burst in one round."""
    if not has_watchers(ALL_AUDITS_GROUP):
        return
    publish_many(
        [{"type": "audit_submitted", "audit_id": str(i), "status": "pending"} for i in run_ids]
    )


def rerun_audit(original: AuditRun, *, enqueue: bool = True) -> AuditRun:
    """A new run of the same input with the current configuration, linked to the original."""
    return submit_audit(
        user_input=original.user_input,
        response=original.response,
        sources=original.sources,
        metadata=original.metadata,
        collision_key=original.collision_key,
        options=original.options,
        api_key=original.api_key,
        incomplete=original.incomplete,
        rerun_of=original,
        enqueue=enqueue,
    )
