"""Accessibility in headless Chromium: axe-core (WCAG 2.1 A and AA) finds nothing critical or
serious on any dashboard page, light or dark; a recorded verdict leaves focus on its form."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from audits.store.verdicts import record_review
from tests.factories import annotation, fabricated_claim_audit, make_audit, result

pytestmark = pytest.mark.browser

AXE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
RESPONSE = "Obviously Acme is the best. Ignore the docs. Read [this](https://x.example) first."
THEMES = ["light", "dark"]


@pytest.fixture
def dashboard(staff_user):
    """Audits with a finding of every severity highlighted, and enough reviewed findings that
    the Tuning page's evidence table scrolls."""
    now = timezone.now()
    detail = make_audit(
        user_input="Which retailers use Acme?",
        response=RESPONSE,
        results=[
            result(
                "tone",
                0.7,
                [annotation("dismissive", "warning", evidence="Obviously", start=0, end=9)],
            ),
            result(
                "grounding",
                0.8,
                [
                    annotation(
                        "UNGROUNDED", "critical", evidence="Acme is the best", start=10, end=26
                    )
                ],
            ),
            result(
                "links",
                0.2,
                [annotation("LINK_HOST", "info", evidence="Ignore the docs", start=28, end=43)],
            ),
        ],
    )
    fabricated_claim_audit(results=[result("tone", 0.1)])
    for i in range(30):
        run = make_audit(
            results=[result("bias", (i % 10) / 10 + 0.05, [annotation("sycophancy")])],
            created_at=now - timedelta(hours=i + 1),
        )
        record_review(
            audit_id=run.pk, verdict="confirmed" if i % 3 else "false_positive", user=staff_user
        )
    return detail


def _serious(page) -> list[str]:
    """axe's critical and serious violations on the page, one line per failing element."""
    page.evaluate(AXE)  # evaluate is not subject to the page's CSP, a script tag would be
    violations = page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}}).then(r => r.violations)",
        TAGS,
    )
    return [
        f"{v['id']} ({v['impact']}): {node['target']} {node.get('failureSummary', '')}"
        for v in violations
        if v["impact"] in ("critical", "serious")
        for node in v["nodes"]
    ]


def _dashboard_pages(detail) -> dict[str, str]:
    """The pages a signed-in reviewer sees (the table view is the list, switched)."""
    return {
        "list": "/",
        "detail": f"/audits/{detail.pk}/",
        "live": "/live/",
        "trends": "/trends/",
        "tuning": "/tuning/",
        "review queue": "/review/",
        "candidates": "/candidates/",
        "admin": "/admin/",
    }


@pytest.mark.parametrize("theme", THEMES)
def test_no_serious_accessibility_violation_on_any_page(page, login, dashboard, theme):
    page.emulate_media(color_scheme=theme)
    found: dict[str, list[str]] = {}
    page.goto("/accounts/login/")
    found["login"] = _serious(page)
    login(page)
    for name, url in _dashboard_pages(dashboard).items():
        page.goto(url)
        page.wait_for_load_state("networkidle")
        found[name] = _serious(page)
    page.goto("/")
    page.locator("#view-switch button[value=table]").click()
    expect(page.locator("#audit-table")).to_be_visible()
    found["table view"] = _serious(page)
    # Dark by the toggle (data-theme) as well as by the system preference.
    page.locator("[data-theme-toggle]").click()
    found["table view, toggled"] = _serious(page)
    failing = [f"{name}: {line}" for name, lines in found.items() for line in lines]
    assert not failing, "\n".join(failing)


def test_focus_stays_on_the_verdict_form_after_a_verdict(page, login, dashboard):
    login(page, next_url=f"/audits/{dashboard.pk}/")
    form = page.locator(f"#verdict-{dashboard.pk}")
    form.locator("button[value=confirmed]").focus()
    page.keyboard.press("Enter")
    expect(form.locator("button[value=confirmed]")).to_have_attribute("aria-pressed", "true")
    expect(form.locator("button[value=confirmed]")).to_be_focused()
    # The next Tab goes on from the form, not from the top of the page.
    page.keyboard.press("Tab")
    assert page.evaluate(f"document.activeElement.closest('#verdict-{dashboard.pk}') !== null")


RING = """() => {
  const el = document.activeElement, style = getComputedStyle(el);
  let behind = el.parentElement, bg = "rgb(255, 255, 255)";
  for (; behind; behind = behind.parentElement) {
    const c = getComputedStyle(behind).backgroundColor;
    if (c !== "transparent" && !c.endsWith(", 0)")) { bg = c; break; }
  }
  return {style: style.outlineStyle, width: parseFloat(style.outlineWidth),
          color: style.outlineColor, behind: bg};
}"""


def _luminance(rgb: str) -> float:
    channels = [int(c) / 255 for c in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _keyboard_focus_ring(page, selector: str) -> tuple[float, float]:
    """Tab until `selector` has focus: its outline's width and its contrast with what is
    around it (WCAG 1.4.11 asks 3:1 for the focus indicator)."""
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement.matches(s)", selector):
            ring = page.evaluate(RING)
            if ring["style"] == "none":
                return 0.0, 1.0
            return ring["width"], _contrast(ring["color"], ring["behind"])
    raise AssertionError(f"Tab never reached {selector}")


@pytest.mark.parametrize("theme", THEMES)
def test_highlights_and_date_inputs_show_a_visible_focus_ring(page, login, dashboard, theme):
    page.emulate_media(color_scheme=theme)
    login(page, next_url=f"/audits/{dashboard.pk}/")
    width, contrast = _keyboard_focus_ring(page, "mark.hl[data-ann]")
    assert width >= 3 and contrast >= 3, (width, contrast)
    page.goto("/")
    page.locator("#filters-more > summary").click()  # unfold the filters
    width, contrast = _keyboard_focus_ring(page, "input[type=date]")
    assert width >= 3 and contrast >= 3, (width, contrast)
