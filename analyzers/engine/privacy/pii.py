"""Personal data in text: e-mail addresses, phone numbers, payment cards, IBANs, US social
security numbers and IP addresses, each as (start, end, kind) in the text.

Candidates come from one scan per type of the text's `shape` (scan.py: digits as "0",
so every pattern starts with a literal and every quantifier is on one character class:
linear). What a checksum or a numbering plan can confirm is confirmed before it counts:
phone numbers by Google's libphonenumber (`phonenumbers`), cards by the Luhn check
(`stdnum.luhn`) and the card networks' number ranges, IBANs by their country format and
mod-97 check (`stdnum.iban`), SSNs by the ranges the SSA never issues, IPs by `ipaddress`.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterator

import phonenumbers
from stdnum import iban as stdnum_iban
from stdnum import luhn

from .scan import Scan

Found = Iterator[tuple[int, int, str]]

# -- e-mail ---------------------------------------------------------------------------------
# Read outwards from each "@": a local part (at most 64 characters, RFC 5321) before it,
# a domain (at most 253) after it; the domain's labels are checked in Python.
_LOCAL = re.compile(r"[A-Za-z0-9._%+-]{1,64}\Z")
_DOMAIN = re.compile(r"[A-Za-z0-9.-]{1,253}")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")


def find_emails(scan: Scan) -> Found:
    text = scan.text
    at = text.find("@")
    while at != -1:
        local = _LOCAL.search(text, max(0, at - 64), at)
        domain = _DOMAIN.match(text, at + 1)
        found = _email(local.group(), domain.group()) if local and domain else None
        if local is not None and found is not None:
            lead, local_len, domain_len = found
            start = local.start() + lead
            yield start, start + local_len + 1 + domain_len, "email"
        at = text.find("@", at + 1)


def _email(local: str, domain: str) -> tuple[int, int, int] | None:
    """(leading characters to drop, local length, domain length) of a valid address."""
    domain = domain.rstrip(".-")
    lead = len(local) - len(local.lstrip("."))
    local = local.strip(".")
    labels = domain.split(".")
    if (
        not local
        or ".." in local
        or len(labels) < 2
        or not labels[-1].isalpha()
        or len(labels[-1]) < 2
        or not all(_LABEL.match(label) for label in labels)
    ):
        return None
    return lead, len(local), len(domain)


# -- phone ----------------------------------------------------------------------------------
# A run that could hold a phone number: digits with spaces, dots, dashes, slashes and
# brackets between (a "+" or "(" just before it joins it). libphonenumber's matcher then
# reads the run, with its rules against dates, times and number fragments, and validates
# each number against its region's numbering plan; it reads only these runs, never prose.
_PHONE_RUN = re.compile(rb"0[0 ()./-]{5,24}0")
_MIN_PHONE_DIGITS = 7
# A phone number has at most two one-digit groups (a country code, a trunk prefix):
# "1 2 3 4 5 6 7" is a list, and the matcher need not read it.
_LONE_DIGIT = re.compile(rb"(?<![0-9])0(?![0-9])")
_MAX_LONE_DIGITS = 2
# The matcher costs a tenth of a millisecond or more per run: one text has it read this
# many runs at most (a table of numbers is no list of phone numbers).
MAX_PHONE_RUNS = 200
# Dates and times (2024-01-15, 15/01/2024, 10.30.2024) are never phone numbers.
_DATE_SHAPE = re.compile(rb"0000[-/.]00?[-/.]00?|00?[-/.]00?[-/.]0000|00?:00(?::00)?")


def find_phones(scan: Scan, region: str, taken: Callable[[int, int], bool]) -> Found:
    """`taken(start, end)`: whether an earlier finding holds the span (then it is no
    phone number, and the matcher need not read it). At most `MAX_PHONE_RUNS` runs read."""
    text = scan.text
    budget = MAX_PHONE_RUNS
    for match in _PHONE_RUN.finditer(scan.shape):
        start, end = match.span()
        if start and text[start - 1] in "+(":
            start -= 1
        shape = match.group()
        if (
            shape.count(b"0") < _MIN_PHONE_DIGITS
            or len(_LONE_DIGIT.findall(shape)) > _MAX_LONE_DIGITS
            or _DATE_SHAPE.fullmatch(shape)
            or not scan.apart(start, end)
            or taken(start, end)
        ):
            continue
        if budget == 0:
            return
        budget -= 1
        for found_start, found_end, region_code in _phones_in(text[start:end], region):
            yield start + found_start, start + found_end, region_code


@functools.lru_cache(maxsize=1024)
def _phones_in(run: str, region: str) -> tuple[tuple[int, int, str], ...]:
    """The valid phone numbers in one run (runs repeat: a signature, a footer)."""
    return tuple(
        (number.start, number.end, phonenumbers.region_code_for_number(number.number) or "")
        for number in phonenumbers.PhoneNumberMatcher(
            run, region, leniency=phonenumbers.Leniency.VALID
        )
    )


# -- payment cards --------------------------------------------------------------------------
# A run of digits with single spaces or dashes between groups; the groups are read in
# Python so that a card is never cut out of a longer number.
_DIGIT_RUN = re.compile(rb"0[0 -]{11,}0")
_GROUP = re.compile(rb"0+")
_CARD_MIN, _CARD_MAX = 13, 19


def card_network(digits: str) -> str | None:
    """The card network whose issuer ranges and lengths hold `digits`, or None."""
    n = len(digits)
    two, three, four, six = int(digits[:2]), int(digits[:3]), int(digits[:4]), int(digits[:6])
    if digits[0] == "4" and n in (13, 16, 19):
        return "Visa"
    if n == 16 and (51 <= two <= 55 or 2221 <= four <= 2720):
        return "Mastercard"
    if n == 15 and two in (34, 37):
        return "American Express"
    if n >= 16 and (four == 6011 or 644 <= three <= 649 or two == 65 or 622126 <= six <= 622925):
        return "Discover"
    if n >= 16 and 3528 <= four <= 3589:
        return "JCB"
    if n >= 14 and (300 <= three <= 305 or two in (36, 38, 39)):
        return "Diners Club"
    if n >= 16 and two == 62:
        return "UnionPay"
    return None


def find_cards(scan: Scan) -> Found:
    text = scan.text
    for run in _DIGIT_RUN.finditer(scan.shape):
        if not scan.apart(run.start(), run.end(), "-"):
            continue
        base = run.start()
        groups = [(base + g.start(), base + g.end()) for g in _GROUP.finditer(run.group())]
        i = 0
        while i < len(groups):
            found = _card_from(text, groups, i)
            if found is None:
                i += 1
                continue
            j, network = found
            yield groups[i][0], groups[j][1], network
            i = j + 1


# Cards are written whole or in groups (4-4-4-4, 4-6-5, 4-4-4-4-3): a first group of four
# digits or more, later groups of two or more, five groups at most.
_CARD_FIRST_GROUP, _CARD_GROUP, _CARD_GROUPS = 4, 2, 5


def _card_from(text: str, groups: list[tuple[int, int]], i: int) -> tuple[int, str] | None:
    """The last group and network of the longest valid card starting at group `i`."""
    if groups[i][1] - groups[i][0] < _CARD_FIRST_GROUP:
        return None
    best = None
    digits = ""
    for j in range(i, min(len(groups), i + _CARD_GROUPS)):
        start, end = groups[j]
        if j > i and (start - groups[j - 1][1] != 1 or end - start < _CARD_GROUP):
            break  # two separators in a row, or a lone digit, end a number
        digits += text[start:end]
        if len(digits) > _CARD_MAX:
            break
        if len(digits) >= _CARD_MIN:
            network = card_network(digits)
            if network is not None and luhn.is_valid(digits):
                best = (j, network)
    return best


# -- IBAN -----------------------------------------------------------------------------------
# Where an IBAN may start: a country code and two check digits. The rest is read in
# Python: the compact form, or the printed form's groups of four after single spaces.
_IBAN_START = re.compile(rb"AA00")
_IBAN_MAX = 34


def find_ibans(scan: Scan) -> Found:
    text, shape = scan.text, scan.shape
    n = len(text)
    pos = 0
    while (match := _IBAN_START.search(shape, pos)) is not None:
        start = match.start()
        pos = start + 1
        if not scan.apart(start, start):
            continue
        compact = text[start : start + 4]
        i = start + 4
        ends: list[tuple[int, int]] = []  # (compact length, text end) where a group ends
        while i < n and len(compact) < _IBAN_MAX:
            kind = shape[i]
            if kind in b"0A":
                compact += text[i]
                i += 1
                if i == n or shape[i] not in b"0A":
                    ends.append((len(compact), i))
            elif kind == 32 and len(compact) % 4 == 0 and i + 1 < n and shape[i + 1] in b"0A":
                i += 1  # the space between two groups of four
            else:
                break
        for length, end in reversed(ends):
            if scan.apart(start, end) and stdnum_iban.is_valid(compact[:length]):
                yield start, end, compact[:2]
                pos = end
                break


# -- US social security numbers ------------------------------------------------------------
# AAA-GG-SSSS with dashes or spaces (the same separator twice), not inside a longer number.
_SSN = re.compile(rb"000(?P<sep>[- ])00(?P=sep)0000")
# Numbers published in advertising that the SSA voided.
_VOIDED_SSNS = frozenset({"078051120", "219099999"})


def find_ssns(scan: Scan) -> Found:
    text = scan.text
    for match in _SSN.finditer(scan.shape):
        start, end = match.span()
        separator = chr(match.group("sep")[0])
        area, group, serial = (
            text[start : start + 3],
            text[start + 4 : start + 6],
            text[end - 4 : end],
        )
        if (
            not scan.apart(start, end, "-" + separator)
            or area in ("000", "666")
            or area[0] == "9"
            or group == "00"
            or serial == "0000"
            or area + group + serial in _VOIDED_SSNS
        ):
            continue
        yield start, end, "US"


# -- IP addresses ---------------------------------------------------------------------------
# IPv4 dotted quads; IPv6 from each colon run (hex groups, colons, perhaps a dotted quad),
# widened in Python to the hex group before it.
_IPV4 = re.compile(rb"00{0,2}\.00{0,2}\.00{0,2}\.00{0,2}")
_IPV6 = re.compile(rb":[0-9A-Fa-f:.]{1,44}")
_HEX_BEFORE = re.compile(r"[0-9A-Fa-f]{1,4}\Z")


def find_ips(scan: Scan) -> Found:
    """Public addresses only: private, loopback, link-local and reserved ones name no one."""
    text = scan.text
    spans = [m.span() for m in _IPV4.finditer(scan.shape)]
    if ":" in text:
        for match in _IPV6.finditer(scan.raw):
            start = match.start()
            head = _HEX_BEFORE.search(text, max(0, start - 4), start)
            spans.append((head.start() if head else start, match.end()))
        spans.sort()
    for start, end in spans:
        candidate = text[start:end].rstrip(".")
        end = start + len(candidate)
        if not scan.apart(start, end, ".:"):
            continue
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        if address.is_global:
            yield start, end, f"IPv{address.version}"
