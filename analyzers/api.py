"""GET/PUT /api/config: the configuration file of CONTRACT.md section 5 (admin keys only)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Body, Router
from ninja.errors import HttpError

from .auth import admin_auth
from .config_store import ConfigError, export_config, parse_config, save_config
from .schemas import ErrorOut

router = Router(tags=["config"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 413: ErrorOut, 422: ErrorOut, 429: ErrorOut, 503: ErrorOut}


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
        raise HttpError(
            422,
            [{"loc": ["body", *path.split(".")], "msg": " ".join(msgs)}
             for path, msgs in exc.errors.items()],
        ) from None
    save_config(
        config,
        actor=f"api-key:{request.auth.name}",
        source="api",
        custom_judges=judges if judges is not None else [],
        proxy=body.get("proxy") or {},
    )
    return export_config()
