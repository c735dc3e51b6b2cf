"""`DetailError`: an API error whose body's `detail` is structured, as ninja's own 422s are."""

from __future__ import annotations

from typing import Any

from ninja.errors import HttpError

Detail = list[dict[str, Any]] | dict[str, Any]


class DetailError(HttpError):
    """An HttpError with a list of {loc, msg} errors or an object as its `detail`: ninja
    annotates `message` as str; the API's handler (auditor_site/api.py) renders it as it is."""

    def __init__(self, status_code: int, detail: Detail) -> None:
        super().__init__(status_code, "")
        self.message = detail  # type: ignore[assignment]  # ninja's annotation says str only

    def __str__(self) -> str:
        return str(self.message)
