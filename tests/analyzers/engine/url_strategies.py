"""Hypothesis strategies of URL-like text shared by the bare-URL scan tests: runs built
from URL pieces, and host-shaped URLs (scheme, labels, port, path, query, a trailing
piece)."""

from __future__ import annotations

from hypothesis import strategies as st

# `extra`: pieces added to the common ones (e.g. "<", ">" where tags meet URLs).
COMMON_PIECES = [
    "https://",
    "http://",
    "HTTP://",
    "www.",
    "wWw.",
    "ftp://",
    "//",
    "acme.example",
    "a.docs.example",
    "evil.com",
    "h1",
    ".",
    "..",
    "-",
    ":80",
    ":",
    "/",
    "//",
    "/p",
    "?q=1",
    "?",
    "@",
    "x@evil.com",
    "=",
    "&",
    "%2e",
    "+",
    "_",
    "e.co",
    "0x7f.1",
    "127.0.0.1",
    "xn--e1a",
    ")",
    "é",
    "`",
    "[",
    "]",
]
LABELS = st.sampled_from(
    [
        "acme",
        "example",
        "docs",
        "a",
        "evil",
        "com",
        "h1",
        "0x7f",
        "1",
        "xn--e1a",
        "a-b",
        "www",
        "co",
        "e",
    ]
)
SHAPED = st.builds(
    lambda scheme, labels, port, path, query, extra: (
        scheme + ".".join(labels) + port + path + query + extra
    ),
    st.sampled_from(["https://", "http://", "www.", "HTTPS://", "", "//", "ftp://"]),
    st.lists(LABELS, min_size=1, max_size=4),
    st.sampled_from(["", ":80", ":8080", ":", ":123456"]),
    st.lists(st.sampled_from(["/p", "/", "/a-b", "/x%2e", "/a.b", "//c", "/=&+"]), max_size=3).map(
        "".join
    ),
    st.sampled_from(["", "?q=1", "?", "?a.b", "?u=evil.com", "?x=@"]),
    st.sampled_from(["", "", "", "", ".", ")", "@evil.com", "_", "é", "`x`"]),
)


def url_cores(extra: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """A host-shaped URL, or a run of up to 8 URL pieces."""
    pieces = st.sampled_from([*COMMON_PIECES, *extra])
    return SHAPED | st.lists(pieces, min_size=1, max_size=8).map("".join)
