"""The list's type filter offers the annotation types the engine's analyzers declare, a
custom analyzer's too, and still filters by a stored type that none declares."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from analyzers import config_store
from analyzers.engine.base import Analyzer
from analyzers.engine.registry import build_registry
from tests.factories import annotation, make_audit, result


class ShoutingAnalyzer(Analyzer):
    """A third-party analyzer, configured by dotted path, with its own type."""

    id = "shouting"
    category = "communication"
    annotation_types = ("SHOUTING",)

    async def analyze(self, audit, settings, context):
        return self.result(score=0.0)


@pytest.fixture
def staff_client(client, staff_user) -> Client:
    client.force_login(staff_user)
    return client


@pytest.fixture
def with_shouting(settings):
    settings.AUDITOR_EXTRA_ANALYZERS = [f"{__name__}.ShoutingAnalyzer"]
    config_store._cache.pop("registry", None)  # built again with the extra analyzer
    config_store.invalidate_cache()
    yield
    config_store._cache.pop("registry", None)
    config_store.invalidate_cache()


def type_options(html: str) -> list[str]:
    select = html[html.index('name="type"') :]
    select = select[: select.index("</select>")]
    return [part.split('"', 1)[0] for part in select.split('<option value="')[1:]]


def test_the_type_filter_offers_every_declared_built_in_type(staff_client):
    html = staff_client.get(reverse("audits:list")).content.decode()
    declared = build_registry(include_entry_points=False).annotation_types()
    assert set(declared) <= set(type_options(html))
    # the privacy analyzer's and the raw HTML rule's codes among them
    assert {"PII_EMAIL", "SECRET_API_KEY", "HTML_UNSAFE_MARKUP"} <= set(type_options(html))


def test_the_type_filter_offers_a_custom_analyzers_declared_type(staff_client, with_shouting):
    html = staff_client.get(reverse("audits:list")).content.decode()
    assert "SHOUTING" in type_options(html)
    assert '<option value="shouting">' in html  # and the analyzer filter its id


def test_a_stored_type_no_analyzer_declares_still_filters(staff_client):
    legacy = make_audit(
        results=[
            result("redflag", 0.9, [annotation("LEGACY_CODE", "critical")], should_surface=True)
        ]
    )
    other = make_audit(results=[result("redflag", 0.9, [annotation()], should_surface=True)])
    html = staff_client.get(reverse("audits:list"), {"type": "LEGACY_CODE"}).content.decode()
    assert "LEGACY_CODE" in type_options(html)
    assert '<option value="LEGACY_CODE" selected>' in html
    assert f"audit-card-{legacy.pk}" in html
    assert f"audit-card-{other.pk}" not in html
