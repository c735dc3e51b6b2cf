"""A candidate configuration's evidence: POST /api/config/candidates/{id}/replay, GET .../diff
and POST .../promote (admin keys, as the rest of /api/config; the candidates themselves are
the configuration app's, analyzers.api.router)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError

from analyzers import candidates
from analyzers.api.errors import DetailError
from analyzers.api.router import ONE_ERRORS, get_candidate
from analyzers.auth import admin_auth
from audits.shadow import control
from audits.shadow.compare import compare

router = Router(tags=["config"])


class ReplayIn(Schema):
    limit: int = Field(100, ge=1)
    judged: bool = False  # run the judged analyzers (they call a model)


class PromoteIn(Schema):
    force: bool = False
    reason: str = Field(default="", max_length=2000)


@router.post(
    "/config/candidates/{candidate_id}/replay",
    auth=admin_auth,
    response={202: dict[str, Any], **ONE_ERRORS},
)
def replay_candidate(request: HttpRequest, candidate_id: int, body: ReplayIn):
    """Analyse the latest `limit` stored audits with the candidate, in the background
    (progress: `replay` of GET /api/config/candidates/{id})."""
    if body.limit > settings.AUDITOR_REPLAY_MAX:
        raise DetailError(
            422,
            [
                {
                    "loc": ["body", "limit"],
                    "msg": f"at most {settings.AUDITOR_REPLAY_MAX} (AUDITOR_REPLAY_MAX)",
                }
            ],
        )
    try:
        candidate = control.start_replay(
            get_candidate(candidate_id), limit=body.limit, judged=body.judged
        )
    except (control.ReplayBusy, candidates.CandidateClosed) as exc:
        raise HttpError(409, str(exc)) from None
    candidate.refresh_from_db()
    return Status(202, candidates.candidate_to_dict(candidate, with_config=False))


@router.get(
    "/config/candidates/{candidate_id}/diff",
    auth=admin_auth,
    response={200: dict[str, Any], **ONE_ERRORS},
)
def candidate_diff(request: HttpRequest, candidate_id: int):
    """The candidate's results against the audits' own, with reviewers' verdicts."""
    return compare(get_candidate(candidate_id))


@router.post(
    "/config/candidates/{candidate_id}/promote",
    auth=admin_auth,
    response={200: dict[str, Any], **ONE_ERRORS},
)
def promote_candidate(request: HttpRequest, candidate_id: int, body: PromoteIn | None = None):
    """Make the candidate the configuration (as PUT /api/config). 409 listing the findings
    when it would lose one a reviewer confirmed, unless `force` with a `reason`."""
    body = body or PromoteIn()
    try:
        change, comparison = control.promote_on_evidence(
            get_candidate(candidate_id),
            actor=f"api-key:{request.auth.name}",
            force=body.force,
            reason=body.reason,
        )
    except control.WouldLoseConfirmed as exc:
        raise DetailError(
            409,
            {
                "message": str(exc),
                "confirmed_findings_lost": exc.comparison["confirmed_findings_lost"],
                "hint": 'promote with {"force": true, "reason": ...} to promote anyway',
            },
        ) from None
    except candidates.CandidateClosed as exc:
        raise HttpError(409, str(exc)) from None
    except control.ReasonRequired as exc:
        raise DetailError(422, [{"loc": ["body", "reason"], "msg": str(exc)}]) from None
    return {
        "status": "promoted",
        "version": change.pk if change else None,
        "evidence": change.evidence if change else {},
    }
