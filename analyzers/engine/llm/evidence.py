"""Check that a quote a model gave as evidence really is in the response, and where.

Models copy quotes imperfectly (curly quotes, case, spacing), and sometimes invent them.
A quote is accepted when it matches the response exactly or after normalising case,
quote marks, dashes and whitespace; the evidence kept is then the original text.
"""

from __future__ import annotations

MIN_QUOTE_CHARS = 3

_TRANSLATE = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"',
    "\u2013": "-", "\u2014": "-", "\u2212": "-",
}  # fmt: skip
_STRIP = " \t\r\n\"'`\u2018\u2019\u201c\u201d.…"


def _normalise(text: str) -> tuple[str, list[int]]:
    """Normalised text plus, for each of its characters, the index in `text`."""
    chars: list[str] = []
    index: list[int] = []
    in_space = False
    for i, c in enumerate(text):
        if c.isspace():
            if not in_space and chars:
                chars.append(" ")
                index.append(i)
            in_space = True
            continue
        in_space = False
        c = _TRANSLATE.get(c, c)
        lowered = c.lower()
        chars.append(lowered if len(lowered) == 1 else c)
        index.append(i)
    return "".join(chars).rstrip(), index


def locate_quote(response: str, quote: str | None) -> tuple[int, int] | None:
    """(start, end) of `quote` in `response`, or None when it is not there (or too short)."""
    if not quote:
        return None
    quote = quote.strip(_STRIP) if quote.strip(_STRIP) else quote.strip()
    if len(quote.replace(" ", "")) < MIN_QUOTE_CHARS:
        return None
    pos = response.find(quote)
    if pos != -1:
        return pos, pos + len(quote)
    norm_response, index = _normalise(response)
    norm_quote, _ = _normalise(quote)
    if len(norm_quote.replace(" ", "")) < MIN_QUOTE_CHARS:
        return None
    pos = norm_response.find(norm_quote)
    if pos == -1:
        return None
    return index[pos], index[pos + len(norm_quote) - 1] + 1
