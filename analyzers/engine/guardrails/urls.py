"""URL canonicalisation and the host / technical-doc rules.

A URL from model output is judged the way a browser would read it: HTML entities and
markdown backslash escapes are decoded first, tabs and newlines vanish, the scheme and
host are lower-cased, the host is IDNA-encoded and the default port dropped. Tricks that
make a URL mean something else than it seems (userinfo, backslashes in the authority,
odd slashes after the scheme) are reported as a `problem`, never silently repaired.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from urllib.parse import unquote

import idna

_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_TAB_NEWLINE = re.compile(r"[\t\n\r]")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTHORITY_END = re.compile(r"[/\\?#]")
_HOST_CHARS = re.compile(r"[a-z0-9.\-_]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}

SAFE_SCHEMES = frozenset(_DEFAULT_PORTS)

# Problems a URL can have; the link rules turn them into annotation codes.
NOT_ABSOLUTE = "not an absolute URL"
UNSAFE_SCHEME = "scheme is not http(s)"
USERINFO = "userinfo in URL"
BACKSLASH = "backslash in URL authority"
MALFORMED = "malformed URL"


@dataclass(frozen=True, slots=True)
class CanonicalURL:
    raw: str
    url: str | None  # the canonical form; None when the URL is not usable http(s)
    scheme: str = ""
    host: str = ""
    port: int | None = None
    path: str = "/"
    problem: str | None = None

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
    return text.strip("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11\x12"
                      "\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f ")


def _encode_host(host: str) -> str | None:
    host = unquote(host).lower().rstrip(".")
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
    text = decode(raw)
    m = _SCHEME.match(text)
    if m is None:
        return CanonicalURL(raw, None, problem=NOT_ABSOLUTE)
    scheme = m.group(1).lower()
    if scheme not in SAFE_SCHEMES:
        return CanonicalURL(raw, None, scheme=scheme, problem=UNSAFE_SCHEME)
    rest = text[m.end():]
    if not rest.startswith("//") or rest[2:3] in ("/", "\\"):
        return CanonicalURL(raw, None, scheme=scheme, problem=MALFORMED)
    rest = rest[2:]
    end = _AUTHORITY_END.search(rest)
    cut = end.start() if end else len(rest)
    authority, tail = rest[:cut], rest[cut:]
    if tail.startswith("\\"):
        return CanonicalURL(raw, None, scheme=scheme, problem=BACKSLASH)
    problem = None
    if "@" in authority:
        problem = USERINFO
        authority = authority.rpartition("@")[2]
    port: int | None = None
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return CanonicalURL(raw, None, scheme=scheme, problem=MALFORMED)
        host = authority[: close + 1].lower()
        port_text = authority[close + 1:]
        if port_text and not port_text.startswith(":"):
            return CanonicalURL(raw, None, scheme=scheme, problem=MALFORMED)
        port_text = port_text[1:]
    else:
        host_text, _, port_text = authority.partition(":")
        encoded = _encode_host(host_text)
        if encoded is None:
            return CanonicalURL(raw, None, scheme=scheme, problem=MALFORMED)
        host = encoded
    if port_text:
        if not port_text.isdigit() or len(port_text) > 5 or int(port_text) > 65535:
            return CanonicalURL(raw, None, scheme=scheme, host=host, problem=MALFORMED)
        port = int(port_text)
    if port == _DEFAULT_PORTS[scheme]:
        port = None
    tail = tail.replace("\\", "/")
    if not tail.startswith("/"):
        tail = "/" + tail
    path = tail
    for sep in ("?", "#"):
        path = path.split(sep, 1)[0]
    netloc = host if port is None else f"{host}:{port}"
    return CanonicalURL(
        raw,
        f"{scheme}://{netloc}{tail}",
        scheme=scheme,
        host=host,
        port=port,
        path=path,
        problem=problem,
    )


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """`acme.example` allows exactly that host; `.acme.example` also its subdomains."""
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
            entry = entry[len(prefix):]
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
        if target == prefix or target.startswith(prefix + "/") or (
            target.rstrip("/") == prefix
        ):
            return True
    return False


def tech_doc_path_allowed(url: CanonicalURL, allowed: tuple[str, ...]) -> bool:
    if not allowed:
        return False
    path = url.path.rstrip("/") or "/"
    full = (url.host + url.path).rstrip("/")
    return any(entry in (path, full) for entry in allowed)
