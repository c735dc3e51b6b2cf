"""An audit's link table, kept in one `AuditLinks` row, and read back as links.

The row holds the contract's link objects (docs/reference/contract.md section 2: url, label, decision,
reason, http_status, healthy) as one JSON array, in the report's order: the export writes
it out as it is. One row per audit instead of one per link (18 on the benchmark's shape:
36 b-tree entries and 18 converted rows per stored report), as the trace lines are kept
(audits.store.trace_rows).

The links analyzer's result reports the same list (`supplementary["links"]`). Stored
twice, it was a third of the bytes an audit of the benchmark's shape writes, so a
result whose list is the audit's link table keeps `IN_LINK_ROW` in its place, and the
readers put the row back (`with_links`, `with_links_json`): the API and the export give
the contract's list as before. A list that differs (capped at another limit) is stored
as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from audits.models import AuditLinks


class StoredLink(NamedTuple):
    """One row of the link table, as the pages show it."""

    url: str
    label: str
    decision: str
    reason: str | None
    http_status: int | None
    healthy: bool | None


IN_LINK_ROW = "@link_row"  # a stored supplementary["links"]: the audit's link row
_IN_LINK_ROW_JSON = json.dumps({"links": IN_LINK_ROW})[1:-1]  # '"links": "@link_row"'


def contract_dicts(links: Iterable[Any]) -> list[dict[str, Any]]:
    """The contract's link objects of `links` (e.g. the engine's `LinkRecord`s)."""
    return [
        {
            "url": link.url,
            "label": link.label,
            "decision": link.decision,
            "reason": link.reason,
            "http_status": link.http_status,
            "healthy": link.healthy,
        }
        for link in links
    ]


def packed(links: Iterable[Any]) -> str:
    """The JSON text of one row holding `links` (objects with the contract's fields)."""
    return row_json(contract_dicts(links))


def row_json(dicts: list[dict[str, Any]]) -> str:
    """The JSON text of one row holding these `contract_dicts`."""
    return json.dumps(dicts, separators=(",", ":"))


def stored_supplementary(analyzer_id: str, supplementary: Any, links: list[dict[str, Any]]) -> Any:
    """What is stored of a result's `supplementary` beside the audit's link row holding
    `links` (`contract_dicts`): the links analyzer's copy of that list is left out."""
    if (
        analyzer_id == "links"
        and links
        and isinstance(supplementary, dict)
        and supplementary.get("links") == links
    ):
        return {**supplementary, "links": IN_LINK_ROW}
    return supplementary


def with_links(supplementary: Any, links: Any) -> Any:
    """A stored `supplementary` as the analyzer reported it: `links` (the audit's link
    row, as read) in the place `stored_supplementary` left."""
    if isinstance(supplementary, dict) and supplementary.get("links") == IN_LINK_ROW:
        return {**supplementary, "links": links}
    return supplementary


def with_links_json(text: str, row: str | None) -> str:
    """`with_links` on the stored JSON text of a supplementary, with the row's text (the
    export writes both as stored). The marker is a key and value of the top object: a
    string inside the JSON cannot hold its unescaped quotes."""
    if IN_LINK_ROW not in text:
        return text
    return text.replace(_IN_LINK_ROW_JSON, f'"links": {row or "[]"}', 1)


def link_dicts(text: str | None) -> list[dict[str, Any]]:
    """The contract's link objects of a row's text (none for no row)."""
    return json.loads(text) if text else []


def stored_links(text: str | None) -> list[StoredLink]:
    return [
        StoredLink._make(link.get(name) for name in StoredLink._fields) for link in link_dicts(text)
    ]


def row_text(run: Any) -> str | None:
    """The text of `run`'s link row; None when it has none (no links)."""
    try:
        return run.link_table.rows
    except AuditLinks.DoesNotExist:
        return None
