"""Secrets in text: well-known API key formats, private-key blocks and JSON Web Tokens.

The formats follow the published rules of detect-secrets (Yelp, `detect_secrets/plugins`)
and gitleaks (`config/gitleaks.toml`). detect-secrets itself is not used: it scans line by
line, reports values without their offsets, and its entropy plugins flag ordinary hashes
and ids. Each format starts with a literal (so `re` jumps between its occurrences) and
every quantifier is on one character class and bounded: a scan is linear in the text.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator

from .scan import Scan

# Format name -> pattern over the text's ASCII bytes; each match must stand alone (no key
# character on either side), checked in `find_keys`.
_FORMATS: dict[str, re.Pattern[bytes]] = {
    # OpenAI: `sk-`, then a project, service-account or admin prefix (optional) and the key
    # (legacy keys have 48 characters, project keys over 100); letters and digits mixed.
    "openai": re.compile(rb"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,300}"),
    # AWS access key ids: AKIA (long-term), ASIA (temporary), ABIA, ACCA, A3T*.
    "aws": re.compile(rb"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}"),
    # GitHub classic tokens: ghp_ (personal), gho_ (OAuth), ghu_/ghs_ (app), ghr_ (refresh).
    "github": re.compile(rb"gh[pousr]_[A-Za-z0-9]{36,251}"),
    # GitHub fine-grained personal access tokens.
    "github_pat": re.compile(rb"github_pat_[A-Za-z0-9_]{82,240}"),
    # Slack: xoxb- (bot), xoxp- (user), xoxa- (app), xoxo-/xoxs-/xoxr-; a team number first.
    "slack": re.compile(rb"xox[bpaors]-[0-9]{6,20}-[0-9A-Za-z-]{8,250}"),
    # Stripe live secret (sk_live_) and restricted (rk_live_) keys; test keys are not secret.
    # The pattern starts at "k_live_"; the "s" or "r" before it is checked in Python.
    "stripe": re.compile(rb"k_live_[0-9A-Za-z]{24,247}"),
    # Google API keys: AIza and 35 characters.
    "google": re.compile(rb"AIza[0-9A-Za-z_-]{35}"),
    # PEM, OpenSSH and PGP private-key headers (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ...).
    "private_key": re.compile(rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    # JSON Web Tokens: three base64url parts, the header starting `{"` (eyJ); the header
    # must decode to a JSON object with "alg" (`_is_jwt`).
    "jwt": re.compile(rb"eyJ[A-Za-z0-9_-]{8,4096}\.[A-Za-z0-9_-]{2,65536}\.[A-Za-z0-9_-]{0,8192}"),
}

KIND_LABELS = {
    "openai": "OpenAI API key",
    "aws": "AWS access key id",
    "github": "GitHub token",
    "github_pat": "GitHub token",
    "slack": "Slack token",
    "stripe": "Stripe live key",
    "google": "Google API key",
    "private_key": "Private key",
    "jwt": "JSON Web Token",
}

# Every format but a private key's header and a JSON Web Token has 20 or more key
# characters in a row, which prose seldom has: a text without such a run, "eyJ" and
# "-----BEGIN" skips the scans.
_KEY_RUN = 20
# How far past a private-key header its END line is looked for.
_PRIVATE_KEY_MAX = 16384
_PEM_END = re.compile(rb"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = re.compile(rb"[A-Za-z0-9+/=\s:,.]{0,%d}" % _PRIVATE_KEY_MAX)


def may_hold_keys(scan: Scan) -> bool:
    """False when the text surely holds no key `find_keys` would find."""
    return "eyJ" in scan.text or "-----BEGIN" in scan.text or scan.has_key_run(_KEY_RUN)


def find_keys(scan: Scan) -> Iterator[tuple[int, int, str]]:
    """(start, end, format) of every secret in the text, format by format."""
    if not may_hold_keys(scan):
        return
    raw = scan.raw
    for kind, pattern in _FORMATS.items():
        for match in pattern.finditer(raw):
            start, end = match.span()
            if kind == "stripe":
                start -= 1
                if start < 0 or raw[start] not in b"rs":
                    continue
            if kind == "private_key":
                yield start, _private_key_end(raw, end), kind
                continue
            if _key_char(raw, start - 1) or _key_char(raw, end):
                continue
            if (kind == "openai" and not _mixed(match.group()[3:])) or (
                kind == "jwt" and not _is_jwt(match.group())
            ):
                continue
            yield start, end, kind


def _key_char(raw: bytes, i: int) -> bool:
    return 0 <= i < len(raw) and (chr(raw[i]).isalnum() or raw[i] in b"_-")


def _private_key_end(raw: bytes, header_end: int) -> int:
    """The end of the block: its END line when one follows within the bound, else the
    end of the base64 body (a cut-off key still leaks what it shows)."""
    footer = _PEM_END.search(raw, header_end, header_end + _PRIVATE_KEY_MAX)
    if footer is not None:
        return footer.end()
    body = _PEM_BODY.match(raw, header_end)
    return header_end + len(body.group().rstrip()) if body else header_end


def _mixed(body: bytes) -> bool:
    """Letters and digits both: `sk-` followed by a hyphenated phrase is prose."""
    return any(48 <= c <= 57 for c in body) and any(chr(c).isalpha() for c in body)


def _is_jwt(token: bytes) -> bool:
    """The header decodes (base64url) to a JSON object with an "alg" member."""
    header = token.split(b".", 1)[0]
    try:
        value = json.loads(base64.urlsafe_b64decode(header + b"=" * (-len(header) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(value, dict) and "alg" in value
