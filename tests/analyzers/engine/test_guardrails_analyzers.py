"""The links, grounding and prompt_leak analyzers inside the Auditor, health checks included."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from analyzers.engine.auditor import Auditor
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput
from analyzers.engine.linkcheck import LinkChecker
from analyzers.engine.registry import build_registry


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self.send_response(200 if "decathlon" in self.path or self.path == "/ok" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def config_for(host: str, check_health: bool = True, **analyzers) -> AuditorConfig:
    return AuditorConfig.model_validate(
        {
            "analyzers": {
                "redflag": {"enabled": False},
                "bias": {"enabled": False},
                "tone": {"enabled": False},
                "links": {"check_health": check_health, "timeout_s": 2},
                "grounding": {"case_study_url": f"http://{host}/customers/{{slug}}"},
                **analyzers,
            },
            "allowed_hosts": [host.split(":")[0]],
            "known_customers": [
                {
                    "name": "Decathlon",
                    "slug": "decathlon",
                    "facts": ["Decathlon grew conversion by 50%"],
                },
                {"name": "Globex", "slug": "globex", "facts": ["Globex grew 30%"]},
            ],
        }
    )


def auditor(config: AuditorConfig) -> Auditor:
    return Auditor(
        config,
        build_registry(include_entry_points=False),
        services={"link_checker": LinkChecker(allow_private_networks=True)},
    )


async def test_health_checks_fill_the_link_table_and_flag_dead_links(server):
    response = f"See [ok](http://{server}/ok) and [gone](http://{server}/gone)."
    report = await auditor(config_for(server)).audit(AuditInput(response=response))
    table = {link.url: (link.http_status, link.healthy) for link in report.links}
    assert table == {f"http://{server}/ok": (200, True), f"http://{server}/gone": (404, False)}
    links = next(r for r in report.results if r.analyzer_id == "links")
    assert [a.type for a in links.annotations] == ["LINK_UNHEALTHY"]
    assert links.annotations[0].start == response.index(f"http://{server}/gone")


async def test_a_claim_with_an_unhealthy_case_study_link_is_removed(server):
    good = f"Decathlon grew conversion by 50% ([story](http://{server}/customers/decathlon))."
    bad = f"Globex grew 30% ([story](http://{server}/customers/globex))."
    report = await auditor(config_for(server)).audit(AuditInput(response=f"{good} {bad} End."))
    assert report.cleaned_response == f"{good} End."
    grounding = next(r for r in report.results if r.analyzer_id == "grounding")
    assert grounding.supplementary["reasons"] == ["CASE_STUDY_LINK_UNHEALTHY"]
    assert grounding.surfaced and grounding.score == 1.0


async def test_without_health_checks_the_claim_stays(server):
    bad = f"Globex grew 30% ([story](http://{server}/customers/globex))."
    report = await auditor(config_for(server, check_health=False)).audit(AuditInput(response=bad))
    assert report.cleaned_response == bad
    assert all(link.healthy is None for link in report.links)


async def test_private_networks_are_refused_by_default(server):
    config = config_for(server)
    report = await Auditor(config, build_registry(include_entry_points=False)).audit(
        AuditInput(response=f"See [ok](http://{server}/ok).")
    )
    assert report.links[0].healthy is False and report.links[0].http_status is None


async def test_the_pipeline_runs_once_and_fills_the_report():
    config = config_for("acme.example", check_health=False)
    response = "Namedrop:\nHi [x](javascript:alert(1)).\n\nGlobex grew 99%."
    report = await auditor(config).audit(AuditInput(response=response))
    assert report.cleaned_response == "Hi x.\n\n"
    by_id = {r.analyzer_id: r for r in report.results}
    assert {a.type for a in by_id["links"].annotations} == {"LINK_UNSAFE_SCHEME"}
    assert by_id["links"].should_surface and by_id["links"].score == 1.0
    assert by_id["prompt_leak"].category == "compliance" and by_id["prompt_leak"].surfaced
    assert by_id["grounding"].supplementary["reasons"] == [
        "METRIC_NOT_IN_SOURCES",
        "MISSING_CASE_STUDY_LINK",
    ]
    assert report.trace.count("[AUDIT] ══ paragraph in ══") == 2
    assert report.links[0].decision == "strip"


async def test_a_disabled_analyzer_disables_its_rules():
    config = config_for("acme.example", check_health=False, prompt_leak={"enabled": False})
    report = await auditor(config).audit(AuditInput(response="Namedrop:\nHello."))
    assert report.cleaned_response == "Namedrop:\nHello."
    assert "prompt_leak" not in {r.analyzer_id for r in report.results}


async def test_a_clean_response_scores_zero():
    config = config_for("acme.example", check_health=False)
    report = await auditor(config).audit(AuditInput(response="Search is fast."))
    assert all(r.score == 0.0 and not r.surfaced for r in report.results)


async def test_if_the_rules_crash_the_text_passed_on_is_still_inert(monkeypatch):
    from analyzers.engine.auditor import Auditor
    from analyzers.engine.config import AuditorConfig
    from analyzers.engine.contract import AuditInput
    from analyzers.engine.guardrails import analyzers as guardrail_analyzers

    def crash(*args, **kwargs):
        raise IndexError("rule bug")

    monkeypatch.setattr(guardrail_analyzers, "audit_text", crash)
    text = "Click [here](javascript:alert(1)) or <a href='data:x'>this</a>."
    report = await Auditor(AuditorConfig()).audit(AuditInput(response=text))
    failed = {r.analyzer_id for r in report.results if r.status == "failed"}
    assert failed == {"links", "grounding", "prompt_leak"}
    assert report.cleaned_response == (
        "Click \\[here\\](javascript:alert(1)) or &lt;a href='data:x'&gt;this&lt;/a&gt;."
    )
