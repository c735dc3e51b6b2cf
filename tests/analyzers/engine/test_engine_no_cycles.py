"""An audit frees what it made by reference counting alone: no reference cycle is left
for the cyclic garbage collector (whose passes over each audit's leftovers cost the
engine about a sixth of its time)."""

from __future__ import annotations

import asyncio
import gc

from analyzers.engine.auditor import Auditor
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput
from analyzers.engine.registry import build_registry

RESPONSE = (
    "Globex grew 30% with [a study](https://evil.example/x). See https://www.acme.example/d "
    "and www.evil.com/p.\n\n<b>Bold</b> <script>alert(1)</script> Acme answers fast."
)


def test_an_audit_of_every_builtin_analyzer_leaves_no_reference_cycle():
    config = AuditorConfig.model_validate(
        {
            "allowed_hosts": ["www.acme.example"],
            "analyzers": {"links": {"check_health": False}},
        }
    )
    auditor = Auditor(config, build_registry(include_entry_points=False))
    audit = AuditInput(response=RESPONSE, user_input="Is it right?")

    async def audits() -> list:
        return [await auditor.audit(audit) for _ in range(3)]

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(audits())  # warm up: caches, lazily built state
        gc.collect()
        gc.disable()
        try:
            reports = loop.run_until_complete(audits())
            del reports
            assert gc.collect() == 0
        finally:
            gc.enable()
    finally:
        loop.close()
