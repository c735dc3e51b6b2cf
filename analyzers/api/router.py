"""GET/PUT /api/config: the configuration file of docs/reference/contract.md section 5 (admin keys only);
candidate configurations (create, list, read, discard), the history and restore."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Body, Field, Router, Schema, Status
from ninja.errors import HttpError

from analyzers import candidates
from analyzers.auth import admin_auth
from analyzers.config_store import ConfigError, export_config, parse_config, save_config
from analyzers.models import CandidateConfig, ConfigChange

from .errors import DetailError
from .schemas import ErrorOut

router = Router(tags=["config"])
ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
    503: ErrorOut,
}
ONE_ERRORS = {**ERRORS, 404: ErrorOut, 409: ErrorOut}


class CandidateIn(Schema):
    name: str = Field(..., min_length=1, max_length=200)
    config: dict[str, Any]
    shadow_sample_rate: float = Field(1.0, ge=0.0, le=1.0)
    judged: bool = False  # shadow analysis runs the judged analyzers (they call a model)


class RestoreIn(Schema):
    version: int
    reason: str = Field("", max_length=2000)


def config_errors(exc: ConfigError, *prefix: str) -> HttpError:
    """422 naming each field of an invalid configuration, as PUT /api/config does."""
    return DetailError(
        422,
        [
            {"loc": ["body", *prefix, *path.split(".")], "msg": " ".join(msgs)}
            for path, msgs in exc.errors.items()
        ],
    )


def get_candidate(candidate_id: int) -> CandidateConfig:
    candidate = CandidateConfig.objects.filter(pk=candidate_id).first()
    if candidate is None:
        raise HttpError(404, f"no candidate {candidate_id}")
    return candidate


@router.get("/config", auth=admin_auth, response={200: dict[str, Any], **ERRORS})
def get_config(request: HttpRequest):
    """The whole configuration; `PUT` it back unchanged and nothing changes."""
    return export_config()


@router.put("/config", auth=admin_auth, response={200: dict[str, Any], **ERRORS})
def put_config(request: HttpRequest, body: dict[str, Any] = Body(...)):  # noqa: B008
    """Replace the configuration (validated, analyzer settings by each analyzer's model)."""
    try:
        config, judges = parse_config(body)
    except ConfigError as exc:
        raise config_errors(exc) from None
    save_config(
        config,
        actor=f"api-key:{request.auth.name}",
        source="api",
        custom_judges=judges if judges is not None else [],
        proxy=body.get("proxy") or {},
    )
    return export_config()


@router.get("/config/history", auth=admin_auth, response={200: list[dict[str, Any]], **ERRORS})
def config_history(request: HttpRequest, limit: int = 50):
    """The configuration's versions, newest first: who, why, the candidate and evidence."""
    return candidates.history(limit)


@router.post("/config/restore", auth=admin_auth, response={200: dict[str, Any], **ONE_ERRORS})
def restore_config(request: HttpRequest, body: RestoreIn):
    """Make the configuration what it was after `version` (recorded as a new version)."""
    try:
        change = candidates.restore(
            body.version, actor=f"api-key:{request.auth.name}", reason=body.reason
        )
    except ConfigChange.DoesNotExist:
        raise HttpError(404, f"no configuration version {body.version}") from None
    except candidates.NotRestorable as exc:
        raise HttpError(409, str(exc)) from None
    return {"version": change.pk if change else None, "config": export_config()}


@router.post("/config/candidates", auth=admin_auth, response={201: dict[str, Any], **ONE_ERRORS})
def create_candidate(request: HttpRequest, body: CandidateIn):
    """A candidate configuration (the schema of PUT /api/config), analysed in shadow."""
    try:
        candidate = candidates.create_candidate(
            name=body.name,
            config=body.config,
            sample_rate=body.shadow_sample_rate,
            judged=body.judged,
            actor=f"api-key:{request.auth.name}",
        )
    except ConfigError as exc:
        raise config_errors(exc, "config") from None
    except candidates.CandidateLimit as exc:
        raise HttpError(409, str(exc)) from None
    return Status(201, candidates.candidate_to_dict(candidate))


@router.get("/config/candidates", auth=admin_auth, response={200: list[dict[str, Any]], **ERRORS})
def list_candidates(
    request: HttpRequest, status: Literal["shadow", "promoted", "discarded"] | None = None
):
    """Every candidate (newest first), with its status and replay progress; `status` keeps
    those in one (anything else is a 422)."""
    rows = CandidateConfig.objects.all()
    if status:
        rows = rows.filter(status=status)
    return [candidates.candidate_to_dict(c, with_config=False) for c in rows[:200]]


@router.get(
    "/config/candidates/{candidate_id}",
    auth=admin_auth,
    response={200: dict[str, Any], **ONE_ERRORS},
)
def read_candidate(request: HttpRequest, candidate_id: int):
    return candidates.candidate_to_dict(get_candidate(candidate_id))


@router.delete(
    "/config/candidates/{candidate_id}",
    auth=admin_auth,
    response={200: dict[str, Any], **ONE_ERRORS},
)
def discard_candidate(request: HttpRequest, candidate_id: int):
    """Out of shadow for good (a promoted one cannot be: restore another version)."""
    try:
        candidate = candidates.discard(get_candidate(candidate_id))
    except candidates.CandidateClosed as exc:
        raise HttpError(409, str(exc)) from None
    return candidates.candidate_to_dict(candidate, with_config=False)
