"""Group commit of single submissions (`POST /api/audits` under ASGI).

Each submission alone paid a write transaction of its own: SQLite's write lock (waited for
by every concurrent request), the commit, an insert and the enqueue. Here the requests of
one event loop hand their validated audit to one committer, which stores everything
waiting in ONE transaction (`intake.submit_audits` / `submit_audits_once`) and answers
each request with its own outcome. The classic scheme: a lone request commits at once (no
added wait); the requests that arrive while a commit is in flight form the next group, at
most `AUDITOR_API_GROUP_MAX` audits.

Every submission keeps its own semantics: invalid `options` (422) and external_id
conflicts (409) concern their request only; when the group's transaction fails on its data
(an IntegrityError, say), nothing of it is kept and its audits are stored one by one, each
request getting its own answer or error; a database that stays locked fails the group's
requests with the same error (503: a client retries).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, DataError, IntegrityError, transaction

from analyzers.api.errors import DetailError
from analyzers.config_store import option_errors
from audits.intake import submit as intake
from audits.store.db_threads import run_in_db_thread

logger = logging.getLogger(__name__)

DEFAULT_GROUP_MAX = 100


@dataclass
class Submission:
    """One submitted audit: the fields of `intake.submit_audits`, its key and id."""

    fields: dict[str, Any]
    api_key: Any
    external_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


# An outcome: the stored run (`was_created`), an ExternalIdConflict, or the exception
# (HttpError 422, a database error) its request raises.
Outcome = Any


def store_submissions(items: list[Submission]) -> list[Outcome]:
    """Store `items` in one transaction (sync; a database thread); their outcomes in order.

    Items with invalid options get their HttpError 422 and are left out. When the
    transaction fails on its data, the items are stored one by one (`_store_alone`)."""
    out: list[Outcome] = [None] * len(items)
    valid: list[int] = []
    for i, item in enumerate(items):
        errors = option_errors(item.options)
        if errors:
            out[i] = DetailError(422, errors)
        else:
            valid.append(i)
    if not valid:
        return out
    try:
        with transaction.atomic():
            stored = _store_together([items[i] for i in valid])
    except DatabaseError as exc:
        if not isinstance(exc, (IntegrityError, DataError)):
            for i in valid:  # the database itself (locked, gone): the same for every item
                out[i] = exc
            return out
        logger.warning(
            "a group of %d submissions failed; storing them one by one", len(valid), exc_info=True
        )
        stored = [_store_alone(items[i]) for i in valid]
    except Exception:
        logger.warning(
            "a group of %d submissions failed; storing them one by one", len(valid), exc_info=True
        )
        stored = [_store_alone(items[i]) for i in valid]
    for i, outcome in zip(valid, stored, strict=True):
        out[i] = outcome
    return out


def _store_together(items: list[Submission]) -> list[Outcome]:
    """Per API key: those without external_id through `submit_audits` (one insert), those
    with one through `submit_audits_once` (one lookup; repeats and conflicts inside the
    group resolved as in a batch request)."""
    out: list[Outcome] = [None] * len(items)
    by_key: dict[Any, list[int]] = {}
    for i, item in enumerate(items):
        by_key.setdefault(getattr(item.api_key, "pk", item.api_key), []).append(i)
    for indexes in by_key.values():
        api_key = items[indexes[0]].api_key
        plain = [i for i in indexes if items[i].external_id is None]
        keyed = [i for i in indexes if items[i].external_id is not None]
        if keyed:
            runs = intake.submit_audits_once(
                [{**items[i].fields, "external_id": items[i].external_id} for i in keyed],
                api_key=api_key,
            )
            for i, run in zip(keyed, runs, strict=True):
                out[i] = run
        if plain:
            fresh = intake.submit_audits([items[i].fields for i in plain], api_key=api_key)
            for i, made in zip(plain, fresh, strict=True):
                out[i] = made
    return out


def _store_alone(item: Submission) -> Outcome:
    """One submission in its own transaction, as before group commit; its error returned."""
    try:
        return intake.submit_audit(
            **item.fields, external_id=item.external_id, api_key=item.api_key
        )
    except intake.ExternalIdConflict as exc:
        return exc
    except Exception as exc:
        return exc


class GroupCommitter:
    """Hands the submissions of one event loop to one committer at a time.

    `submit` queues an item and waits for its outcome. When no commit is in flight, one
    starts at once with what is waiting (at most `max_group` items); the items queued
    meanwhile form the next group. The commit runs in a task of its own: a client that
    goes away does not cancel the others' commit (its audit is stored all the same)."""

    def __init__(self, max_group: int) -> None:
        self.max_group = max(1, max_group)
        self.waiting: list[tuple[Submission, asyncio.Future]] = []
        self.committing: asyncio.Task | None = None

    async def submit(self, request: Any, item: Submission) -> Outcome:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((item, future))
        if self.committing is None:
            self.committing = asyncio.ensure_future(self._commit_all(request))
        return await future

    async def _commit_all(self, request: Any) -> None:
        group: list[tuple[Submission, asyncio.Future]] = []
        try:
            while self.waiting:
                group = self.waiting[: self.max_group]
                del self.waiting[: self.max_group]
                try:
                    outcomes = await run_in_db_thread(
                        request, store_submissions, [item for item, _ in group]
                    )
                except Exception as exc:  # pragma: no cover - store_submissions returns errors
                    outcomes = [exc] * len(group)
                logger.debug("group commit: %d submissions in one transaction", len(group))
                for (_, future), outcome in zip(group, outcomes, strict=True):
                    if not future.done():  # a request whose client went away
                        future.set_result(outcome)
        finally:
            self.committing = None
            for _, future in group + self.waiting:  # only when this task was cancelled
                if not future.done():
                    future.set_exception(DatabaseError("the submission may not have been stored"))
            self.waiting.clear()


_committers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GroupCommitter] = (
    weakref.WeakKeyDictionary()
)


def committer() -> GroupCommitter:
    """The committer of the running event loop."""
    loop = asyncio.get_running_loop()
    found = _committers.get(loop)
    if found is None:
        found = _committers[loop] = GroupCommitter(
            getattr(settings, "AUDITOR_API_GROUP_MAX", DEFAULT_GROUP_MAX)
        )
    return found


async def submit(request: Any, item: Submission) -> Outcome:
    """Store `item` with whatever else is being submitted now; its outcome (see
    `store_submissions`). Exceptions are raised here, in the request they concern."""
    outcome = await committer().submit(request, item)
    if isinstance(outcome, BaseException) and not isinstance(outcome, intake.ExternalIdConflict):
        raise outcome
    return outcome
