"""URL canonicalisation and the host / technical-doc rules.

A URL from model output is judged the way a browser would read it. HTML entities and
markdown backslash escapes are decoded first (what the renderer does), then the WHATWG URL
Standard parser (`ada-url`, the parser of Node.js) reads it as a browser does: tabs and
newlines vanish, backslashes count as slashes, numeric, octal, hex and short IPv4 forms,
IPv6 with embedded IPv4, percent-encoded, IDNA and fullwidth hosts are all normalised, and
the default port is dropped. Tricks that make a URL mean something else than it seems
(userinfo, backslashes in the authority, odd slashes after the scheme) are reported as a
`problem`, never silently repaired.

A markdown renderer does not hand the URL to the browser as written: markdown-it writes
its href through `normalizeLink` (percent-encoding, punycode). A URL is judged as both
read it, and one whose href goes to another host than the browser reads from the text
(`https://ok.example\\@evil.example`: the href is `https://ok.example%5C@evil.example`)
is refused (`TWO_HOSTS`).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import idna
from ada_url import parse_url
from markdown_it.common.normalize_url import normalizeLink
from markdown_it.common.utils import unescapeAll

_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_TAB_NEWLINE = re.compile(r"[\t\n\r]")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTHORITY_END = re.compile(r"[/\\?#]")
_HOST_CHARS = re.compile(r"[a-z0-9.\-_]+")
_C0_AND_SPACE = "".join(chr(i) for i in range(0x21))
_PARTS = ("href", "hostname", "port", "pathname", "username", "password")
# what `normalizeLink` writes as it is (ASCII letters, digits and mdurl's safe marks; a
# "%" only before two hex digits)
_AS_RENDERED = re.compile(r"(?:[A-Za-z0-9;/?:@&=+$,\-_.!~*'()#]|%[0-9A-Fa-f]{2})*")

SAFE_SCHEMES = frozenset(("http", "https"))

# Problems a URL can have; the link rules turn them into annotation codes.
NOT_ABSOLUTE = "not an absolute URL"
UNSAFE_SCHEME = "scheme is not http(s)"
USERINFO = "userinfo in URL"
BACKSLASH = "backslash in URL authority"
SLASHES = "not two slashes after the scheme"
MALFORMED = "malformed URL"
TWO_HOSTS = "host that a renderer and a browser read differently"


@dataclass(frozen=True, slots=True)
class CanonicalURL:
    raw: str
    url: str | None  # the canonical form; None when the URL is not usable http(s)
    scheme: str = ""
    host: str = ""  # the WHATWG host, also when a problem makes the URL unusable
    port: int | None = None
    path: str = "/"
    problem: str | None = None
    href_host: str = ""  # with TWO_HOSTS: the host of the href a renderer writes

    @property
    def unsafe_scheme(self) -> bool:
        return self.problem in (NOT_ABSOLUTE, UNSAFE_SCHEME)

    @property
    def without_fragment(self) -> str | None:
        """Canonical URL without fragment and trailing slash, to compare two URLs."""
        if self.url is None:
            return None
        base = self.url.split("#", 1)[0]
        return base[:-1] if base.endswith("/") else base


def decode(raw: str) -> str:
    """What a renderer and then a browser make of a link destination."""
    text = html.unescape(raw) if "&" in raw else raw
    if "\\" in text:
        text = _MD_ESCAPE.sub(r"\1", text)
    text = _TAB_NEWLINE.sub("", text)
    return text.strip(_C0_AND_SPACE)


def _encode_host(host: str) -> str | None:
    """An allow-list entry's host in the form the parser gives hosts (IDNA, lower case)."""
    host = host.lower().rstrip(".")
    if not host:
        return None
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            return None
    if not _HOST_CHARS.fullmatch(host):
        return None
    return host


def canonicalize(raw: str) -> CanonicalURL:
    """A link destination as written in markdown or HTML, judged. Its href is the
    unescaped destination normalised (a link, an image, a definition) or the destination
    itself normalised (an autolink): both must go where the browser reading goes."""
    unescaped = unescapeAll(raw) if "\\" in raw or "&" in raw else raw
    hrefs = (unescaped,) if unescaped == raw else (unescaped, raw)
    return parse_http_url(decode(raw), raw, hrefs)


def parse_http_url(
    text: str, raw: str | None = None, hrefs: tuple[str, ...] | None = None
) -> CanonicalURL:
    """An absolute http(s) URL as a browser reads it (the WHATWG URL Standard), refused
    as `TWO_HOSTS` when the href a renderer writes of it (of each of `hrefs`, by default
    of `text`) goes to another host."""
    canon = _parse_http_url(text, text if raw is None else raw)
    if canon.problem in (NOT_ABSOLUTE, UNSAFE_SCHEME):
        return canon  # no http(s) link either way
    for written in (text,) if hrefs is None else hrefs:
        if _AS_RENDERED.fullmatch(written) is not None:
            continue  # written into the href as it is
        href = _parse_http_url(normalizeLink(written), written)
        if href.host != canon.host or (href.problem is not None and canon.problem is None):
            # (refused already, as a backslash in the authority is: the same problem,
            # and where the href goes)
            return CanonicalURL(
                canon.raw,
                None,
                scheme=canon.scheme,
                host=canon.host,
                port=canon.port,
                path=canon.path,
                problem=canon.problem if canon.url is None else TWO_HOSTS,
                href_host=href.host,
            )
    return canon


def _parse_http_url(text: str, raw: str) -> CanonicalURL:
    """`parse_http_url` as a browser reads the text alone."""
    text = _TAB_NEWLINE.sub("", text).strip(_C0_AND_SPACE)
    m = _SCHEME.match(text)
    if m is None:
        return CanonicalURL(raw, None, problem=NOT_ABSOLUTE)
    scheme = m.group(1).lower()
    if scheme not in SAFE_SCHEMES:
        return CanonicalURL(raw, None, scheme=scheme, problem=UNSAFE_SCHEME)
    try:
        parts = parse_url(text, attributes=_PARTS)
    except ValueError:
        return CanonicalURL(raw, None, scheme=scheme, problem=MALFORMED)
    host = parts["hostname"]
    port = int(parts["port"]) if parts["port"] else None
    path = parts["pathname"] or "/"
    rest = text[m.end() :]
    problem = None
    if not rest.startswith("//") or rest[2:3] in ("/", "\\"):
        problem = SLASHES
    else:
        end = _AUTHORITY_END.search(rest, 2)
        cut = end.start() if end else len(rest)
        if rest[cut : cut + 1] == "\\":
            problem = BACKSLASH
        elif "@" in rest[2:cut] or parts["username"] or parts["password"]:
            problem = USERINFO
    if problem in (SLASHES, BACKSLASH):
        return CanonicalURL(
            raw, None, scheme=scheme, host=host, port=port, path=path, problem=problem
        )
    return CanonicalURL(
        raw, parts["href"], scheme=scheme, host=host, port=port, path=path, problem=problem
    )


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """`acme.example` allows exactly that host; `.acme.example` also its subdomains.

    (A trailing dot names the same DNS host: `acme.example.` is `acme.example`.)
    """
    if host.endswith("."):
        host = host[:-1]
    for entry in allowed:
        if entry.startswith("."):
            if host == entry[1:] or host.endswith(entry):
                return True
        elif host == entry:
            return True
    return False


def normalise_host_entry(entry: str) -> str:
    entry = entry.strip().lower().rstrip(".")
    dot = entry.startswith(".")
    core = _encode_host(entry.lstrip(".")) or entry.lstrip(".")
    return "." + core if dot else core


def _strip_scheme(entry: str) -> str:
    entry = entry.strip()
    lowered = entry.lower()
    for prefix in ("https://", "http://"):
        if lowered.startswith(prefix):
            entry = entry[len(prefix) :]
            break
    host, slash, path = entry.partition("/")
    return host.lower() + slash + path


def normalise_prefix(entry: str) -> str:
    return _strip_scheme(entry).rstrip("/")


def normalise_allowed_path(entry: str) -> str:
    entry = entry.strip()
    if entry.startswith("/"):
        return entry.rstrip("/") or "/"
    return _strip_scheme(entry).rstrip("/")


def is_tech_doc(url: CanonicalURL, prefixes: tuple[str, ...]) -> bool:
    target = url.host + url.path
    for prefix in prefixes:
        if target == prefix or target.startswith(prefix + "/") or (target.rstrip("/") == prefix):
            return True
    return False


def tech_doc_path_allowed(url: CanonicalURL, allowed: tuple[str, ...]) -> bool:
    if not allowed:
        return False
    path = url.path.rstrip("/") or "/"
    full = (url.host + url.path).rstrip("/")
    return any(entry in (path, full) for entry in allowed)
