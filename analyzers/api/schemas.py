"""Schemas both API routers share (the configuration's and the audits')."""

from __future__ import annotations

from typing import Any

from ninja import Schema


class ErrorOut(Schema):
    detail: Any
