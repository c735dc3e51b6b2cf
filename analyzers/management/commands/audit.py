"""`python manage.py audit FILE`: audit every line of a JSONL file with the engine alone."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analyzers.engine.auditor import Auditor
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput, AuditReport, Source
from analyzers.engine.linkcheck import LinkChecker
from analyzers.engine.registry import build_registry
from analyzers.policy import audit_services

PROGRESS_MIN_LINES = 200


class CaseLine(BaseModel):
    """One JSONL line; unknown fields (expectations, ids of test cases, ...) are ignored."""

    model_config = ConfigDict(extra="ignore")

    user_input: str = ""
    response: str
    sources: list[Source] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    external_id: str | None = None
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    collision_key: str | None = None


def audit_document(case: CaseLine, report: AuditReport, started: datetime) -> dict[str, Any]:
    """The Audit of docs/reference/contract.md section 2 for an audit that ran outside the database."""
    results = [r.model_dump() for r in report.results]
    return {
        "id": str(uuid.uuid4()),
        "external_id": case.external_id,
        "created_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "status": "complete",
        "user_input": case.user_input,
        "response": case.response,
        "cleaned_response": report.cleaned_response,
        "sources": [s.model_dump() for s in case.sources],
        "metadata": case.metadata,
        "threshold": report.threshold,
        "overall_score": report.overall_score,
        "results": results,
        "surfaced_results": [r for r in results if r["surfaced"]],
        "links": [link.model_dump() for link in report.links],
        "trace": report.trace,
    }


def parse_line(raw: str) -> CaseLine:
    for column, char in enumerate(raw, start=1):
        if "\udc80" <= char <= "\udcff":  # a byte `decode` could not read (surrogateescape)
            raise ValueError(
                f"not valid UTF-8 (byte 0x{ord(char) - 0xDC00:02x} at column {column})"
            )
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    try:
        return CaseLine.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "line"
        raise ValueError(f"{where}: {first['msg']}") from None


def table_row(number: int, doc: dict[str, Any]) -> str:
    codes = sorted({a["type"] for r in doc["surfaced_results"] for a in r["annotations"]})
    failed = [r["analyzer_id"] for r in doc["results"] if r["status"] != "ok"]
    # The highest score leads, as on the dashboard (the mean hides one bad finding).
    highest = max((r["score"] for r in doc["results"] if r["status"] == "ok"), default=0.0)
    excerpt = " ".join(doc["response"].split())[:48]
    flags = ",".join(codes) or "-"
    if failed:
        flags += f" (failed: {','.join(failed)})"
    return f"{number:>5}  {highest:>9.2f}  {'CARD' if doc['surfaced_results'] else '    '}  {flags:<50}  {excerpt}"


class Progress:
    """A one-line progress bar on stderr, shown for files over a few hundred lines."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream, self.total = stream, total
        self.enabled = total > PROGRESS_MIN_LINES
        self.step = max(1, total // 100)

    def update(self, done: int) -> None:
        if self.enabled and (done % self.step == 0 or done == self.total):
            filled = int(30 * done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total}")
            if done == self.total:
                self.stream.write("\n")
            self.stream.flush()


class Command(BaseCommand):
    help = "Audit every line of a JSONL file with the engine alone and print one Audit per line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="JSONL file, one audit input per line ('-' for stdin)")
        parser.add_argument(
            "--config", help="configuration file (JSON, docs/reference/contract.md section 5)"
        )
        parser.add_argument("--format", choices=["jsonl", "table"], default="jsonl")

    def handle(self, *args, **options) -> None:
        config = load_config_file(options["config"])
        lines = read_lines(options["file"])
        errors, failed = asyncio.run(self.audit_lines(lines, config, options["format"]))
        if errors:
            raise CommandError(f"{errors} line(s) could not be audited (see above)", returncode=1)
        if failed:
            raise CommandError(f"an analyzer failed on {failed} line(s) (see above)", returncode=1)

    async def audit_lines(
        self, lines: list[str], config: AuditorConfig, fmt: str
    ) -> tuple[int, int]:
        """(lines that could not be read, lines on which an analyzer failed)."""
        auditor = Auditor(config, registry=command_registry(), services=command_services())
        progress = Progress(sys.stderr, len(lines))
        errors = failed = 0
        if fmt == "table":
            self.stdout.write(
                f"{'line':>5}  {'top score':>9}  card  {'surfaced codes':<50}  response"
            )
        for number, raw in enumerate(lines, start=1):
            progress.update(number)
            if not raw.strip():
                continue
            try:
                case = parse_line(raw)
            except ValueError as exc:
                errors += 1
                self.stderr.write(f"line {number}: {exc}")
                continue
            started = datetime.now(UTC)
            report = await auditor.audit(
                AuditInput(
                    user_input=case.user_input,
                    response=case.response,
                    sources=case.sources,
                    metadata=case.metadata,
                ),
                options=case.options,
                collision_key=case.collision_key,
            )
            doc = audit_document(case, report, started)
            problems = [r for r in doc["results"] if r["status"] != "ok"]
            for result in problems:
                self.stderr.write(
                    f"line {number}: {result['analyzer_id']} {result['status']}: "
                    f"{result.get('error') or 'no reason given'}"
                )
            failed += bool(problems)
            if fmt == "jsonl":
                self.stdout.write(json.dumps(doc, ensure_ascii=False))
            else:
                self.stdout.write(table_row(number, doc))
        return errors, failed


def load_config_file(path: str | None) -> AuditorConfig:
    if path is None:
        return AuditorConfig()
    try:
        return AuditorConfig.model_validate_json(Path(path).read_text())
    except OSError as exc:
        raise CommandError(f"cannot read config {path}: {exc}") from None
    except ValidationError as exc:
        raise CommandError(f"invalid config {path}:\n{exc}") from None


def decode(data: bytes) -> str:
    """UTF-8, keeping undecodable bytes as surrogate escapes: only their lines fail (in
    `parse_line`, with the line number), the rest of the file is audited."""
    return data.decode("utf-8", errors="surrogateescape")


def read_lines(path: str) -> list[str]:
    if path == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        return split_jsonl(decode(stdin.read()) if stdin else sys.stdin.read())
    try:
        return split_jsonl(decode(Path(path).read_bytes()))
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from None


def split_jsonl(text: str) -> list[str]:
    """The lines of a JSONL text, cut at "\n" only: JSON's own line terminator.

    (`str.splitlines()` also cuts at U+2028, U+2029, U+0085, "\x1c"-"\x1e", ... which a
    JSON string may hold unescaped. A "\r" before the "\n" is JSON whitespace.)
    """
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()  # the newline ending the last line opens no line
    return lines


def command_services() -> dict[str, Any]:
    """The services the server's audits get (audits.execution.execute.build_auditor): the
    operator's limits (AUDITOR_LLM_ALLOW_PRIVATE, AUDITOR_LLM_KEY_ENVS,
    AUDITOR_VALIDATOR_MODULES) and the link checker's private-network setting."""
    return {
        "link_checker": LinkChecker(allow_private_networks=settings.AUDITOR_ALLOW_PRIVATE_NETWORKS),
        **audit_services(),
    }


def command_registry():
    return build_registry(settings.AUDITOR_EXTRA_ANALYZERS)
