"""The guardrail settings, compiled once per configuration, and the per-audit source index."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from ..config import AuditorConfig, KnownCustomer
from ..contract import Source
from .syntax.urls import (
    canonicalize,
    normalise_allowed_path,
    normalise_host_entry,
    normalise_prefix,
)

DEFAULT_PATTERNS = ("Namedrop:", "VALUE SELL:", "Customer Example:", "SIGNAL EXTRACTION:")
DEFAULT_CASE_STUDY_URL = "https://www.acme.example/customers/{slug}"


def slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@dataclass(frozen=True)
class Customer:
    name: str
    slug: str
    names: tuple[str, ...]  # name and aliases, lower-cased
    facts: tuple[str, ...]


@dataclass(frozen=True)
class GuardrailSettings:
    """Everything the text rules need, immutable and hashable-by-identity."""

    allowed_hosts: tuple[str, ...] = ()
    brand_name: str = "Acme"
    title_suffix: str = " | Acme"
    customers: tuple[Customer, ...] = ()
    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    tech_doc_prefixes: tuple[str, ...] = ()
    tech_doc_allowed_paths: tuple[str, ...] = ()
    case_study_url: str = DEFAULT_CASE_STUDY_URL
    prompt_leak: bool = True
    links: bool = True
    grounding: bool = True
    bare_urls: str = "strip"  # or "defang"
    # personal data and secrets replaced by placeholders in each cleaned paragraph
    redact: tuple[str, ...] = ()
    redact_region: str = "US"
    # derived
    case_study_prefix: str = field(default="", compare=False)
    case_study_suffix: str = field(default="", compare=False)
    # link decisions by destination (a pure function of these settings), memoised; a
    # fresh dict for every instance, `dataclasses.replace` included
    link_decisions: dict = field(default_factory=dict, init=False, compare=False, repr=False)
    case_links: dict = field(default_factory=dict, init=False, compare=False, repr=False)
    # other values derived from these settings alone (the company matcher of audits
    # without source companies)
    derived: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        *,
        allowed_hosts: Iterable[str] = (),
        brand_name: str = "Acme",
        title_suffix: str = " | Acme",
        known_customers: Iterable[KnownCustomer] = (),
        patterns: Iterable[str] = DEFAULT_PATTERNS,
        tech_doc_prefixes: Iterable[str] = (),
        tech_doc_allowed_paths: Iterable[str] = (),
        case_study_url: str = DEFAULT_CASE_STUDY_URL,
        prompt_leak: bool = True,
        links: bool = True,
        grounding: bool = True,
        bare_urls: str = "strip",
        redact: Iterable[str] = (),
        redact_region: str = "US",
    ) -> GuardrailSettings:
        customers = tuple(
            Customer(
                name=c.name,
                slug=c.slug,
                names=tuple(n.lower() for n in (c.name, *c.aliases) if n.strip()),
                facts=tuple(c.facts),
            )
            for c in known_customers
        )
        template = canonicalize(case_study_url.replace("{slug}", "SLUGMARK")).url or ""
        template = template.split("#", 1)[0]
        mark = "SLUGMARK" if "SLUGMARK" in template else "slugmark"
        prefix, _, suffix = template.partition(mark)
        return cls(
            allowed_hosts=tuple(normalise_host_entry(h) for h in allowed_hosts if h.strip()),
            brand_name=brand_name,
            title_suffix=title_suffix,
            customers=customers,
            patterns=tuple(p for p in patterns if p.strip()),
            tech_doc_prefixes=tuple(normalise_prefix(p) for p in tech_doc_prefixes if p.strip()),
            tech_doc_allowed_paths=tuple(
                normalise_allowed_path(p) for p in tech_doc_allowed_paths if p.strip()
            ),
            case_study_url=case_study_url,
            prompt_leak=prompt_leak,
            links=links,
            grounding=grounding,
            bare_urls="defang" if bare_urls == "defang" else "strip",
            redact=tuple(redact),
            redact_region=redact_region,
            case_study_prefix=prefix,
            case_study_suffix=suffix.rstrip("/"),
        )

    def case_study_for(self, slug: str) -> str:
        return self.case_study_prefix + slug + self.case_study_suffix

    def case_study_slug(self, url_without_fragment: str) -> str | None:
        """The slug when the URL follows the case-study pattern, else None."""
        if not self.case_study_prefix or not url_without_fragment.startswith(
            self.case_study_prefix
        ):
            return None
        rest = url_without_fragment[len(self.case_study_prefix) :]
        if self.case_study_suffix:
            if not rest.endswith(self.case_study_suffix):
                return None
            rest = rest[: -len(self.case_study_suffix)]
        rest = rest.split("?", 1)[0].rstrip("/")
        if not rest or "/" in rest:
            return None
        return rest.lower()


def settings_from_config(
    config: AuditorConfig,
    *,
    links: dict | None = None,
    grounding: dict | None = None,
    prompt_leak: dict | None = None,
) -> GuardrailSettings:
    """Build (cached) settings from the configuration file and the three analyzer sections."""
    # the sections are only read here: copied only to lay overrides over them
    links = _with(config.analyzer_section("links"), links)
    grounding = _with(config.analyzer_section("grounding"), grounding)
    prompt_leak = _with(config.analyzer_section("prompt_leak"), prompt_leak)
    key = (
        tuple(config.allowed_hosts),
        config.brand.name,
        config.brand.title_suffix,
        tuple((c.name, c.slug, tuple(c.aliases), tuple(c.facts)) for c in config.known_customers),
        tuple(prompt_leak.get("patterns", DEFAULT_PATTERNS)),
        tuple(links.get("technical_doc_prefixes", ())),
        tuple(links.get("technical_doc_allowed_paths", ())),
        grounding.get("case_study_url", DEFAULT_CASE_STUDY_URL),
        config.is_enabled("prompt_leak"),
        config.is_enabled("links"),
        config.is_enabled("grounding"),
        links.get("bare_urls") or config.links.bare_urls,
        tuple(config.privacy.detect) if config.privacy.redacts_output else (),
        config.privacy_region(),
    )
    return _cached_key_settings(key)


def _with(section: dict, overrides: dict | None) -> dict:
    return {**section, **overrides} if overrides else section


@lru_cache(maxsize=64)
def _cached_key_settings(key: tuple) -> GuardrailSettings:
    (
        hosts,
        brand,
        suffix,
        customers,
        patterns,
        prefixes,
        allowed,
        case_url,
        pl,
        li,
        gr,
        bare_urls,
        redact,
        region,
    ) = key
    return GuardrailSettings.build(
        allowed_hosts=hosts,
        brand_name=brand,
        title_suffix=suffix,
        known_customers=[
            KnownCustomer(name=n, slug=s, aliases=list(a), facts=list(f))
            for n, s, a, f in customers
        ],
        patterns=patterns,
        tech_doc_prefixes=prefixes,
        tech_doc_allowed_paths=allowed,
        case_study_url=case_url,
        prompt_leak=pl,
        links=li,
        grounding=gr,
        bare_urls=bare_urls,
        redact=redact,
        redact_region=region,
    )


# Sources' URLs recur from audit to audit (the same documents are retrieved again): their
# keys are kept in a bounded LRU, keyed by the URL string alone (a pure function of it).
SOURCE_KEYS_CACHED = 2048
SOURCE_KEY_CACHED_LENGTH = 2048  # longer URLs are parsed every time, never kept


@lru_cache(maxsize=SOURCE_KEYS_CACHED)
def _cached_source_key(url: str) -> str | None:
    return canonicalize(url).without_fragment


def source_key(url: str) -> str | None:
    """`canonicalize(url).without_fragment`: how a source's URL is matched to links."""
    if len(url) > SOURCE_KEY_CACHED_LENGTH:
        return canonicalize(url).without_fragment
    return _cached_source_key(url)


class SourceIndex:
    """Request sources by canonical URL and by company; grows when sources arrive mid-stream."""

    def __init__(self, settings: GuardrailSettings, sources: Iterable[Source] = ()) -> None:
        self.settings = settings
        self.titles: dict[str, str] = {}
        self.company_texts: dict[str, list[str]] = {}
        self.extra_companies: dict[str, Customer] = {}
        self.version = 0
        self.company_version = 0  # sources with a company added
        self.matcher: tuple | None = None  # (company_version, matcher), see grounding
        for customer in settings.customers:
            self.company_texts.setdefault(customer.slug, []).extend(customer.facts)
        for source in sources:
            self.add(source)

    def add(self, source: Source) -> None:
        self.version += 1
        if source.url:
            key = source_key(source.url)
            if key and source.title and key not in self.titles:
                self.titles[key] = source.title
        if source.company and source.company.strip():
            self.company_version += 1
            customer = self.customer_named(source.company)
            if customer is None:
                name = source.company.strip()
                customer = Customer(name=name, slug=slugify(name), names=(name.lower(),), facts=())
                self.extra_companies[name.lower()] = customer
            texts = self.company_texts.setdefault(customer.slug, [])
            texts.append(source.title)
            texts.append(source.text)

    def customer_named(self, name: str) -> Customer | None:
        lowered = name.strip().lower()
        for customer in self.settings.customers:
            if lowered in customer.names:
                return customer
        return self.extra_companies.get(lowered)

    def all_customers(self) -> list[Customer]:
        return [*self.settings.customers, *self.extra_companies.values()]

    def known_slugs(self) -> set[str]:
        return {c.slug.lower() for c in self.all_customers()}
