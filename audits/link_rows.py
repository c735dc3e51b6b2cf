"""An audit's link table, kept in one `AuditLinks` row, and read back as links.

The row holds the contract's link objects (CONTRACT section 2: url, label, decision,
reason, http_status, healthy) as one JSON array, in the report's order: the export writes
it out as it is. One row per audit instead of one per link (18 on the benchmark's shape:
36 b-tree entries and 18 converted rows per stored report), as the trace lines are kept
(audits.trace_rows).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from .models import AuditLinks


class StoredLink(NamedTuple):
    """One row of the link table, as the pages show it."""

    url: str
    label: str
    decision: str
    reason: str | None
    http_status: int | None
    healthy: bool | None


def packed(links: Iterable[Any]) -> str:
    """The JSON text of one row holding `links` (objects with the contract's fields, e.g.
    the engine's `LinkRecord`s)."""
    return json.dumps(
        [{"url": link.url, "label": link.label, "decision": link.decision,
          "reason": link.reason, "http_status": link.http_status, "healthy": link.healthy}
         for link in links],
        separators=(",", ":"),
    )


def link_dicts(text: str | None) -> list[dict[str, Any]]:
    """The contract's link objects of a row's text (none for no row)."""
    return json.loads(text) if text else []


def stored_links(text: str | None) -> list[StoredLink]:
    return [StoredLink(*(link.get(name) for name in StoredLink._fields))
            for link in link_dicts(text)]


def row_text(run: Any) -> str | None:
    """The text of `run`'s link row; None when it has none (no links)."""
    try:
        return run.link_table.rows
    except AuditLinks.DoesNotExist:
        return None
