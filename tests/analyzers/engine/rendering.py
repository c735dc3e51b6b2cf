"""The renderer of the rendering model (CommonMark + GFM-style linkify + raw HTML, as
markdown-it-py does it for most chat UIs), and what its HTML would make a browser do."""

from __future__ import annotations

from html.parser import HTMLParser

from markdown_it import MarkdownIt

from analyzers.engine.guardrails.syntax.urls import host_allowed, parse_http_url

MD = MarkdownIt("commonmark", {"linkify": True, "html": True}).enable("linkify")

URL_ATTRIBUTES = frozenset(
    {
        "href",
        "src",
        "srcset",
        "action",
        "formaction",
        "poster",
        "background",
        "xlink:href",
        "data",
        "codebase",
        "cite",
        "longdesc",
        "lowsrc",
        "dynsrc",
        "ping",
        "manifest",
        "icon",
        "usemap",
        "archive",
        "classid",
        "imagesrcset",
    }
)
FORBIDDEN_TAGS = frozenset(
    {
        "script",
        "style",
        "iframe",
        "object",
        "embed",
        "form",
        "meta",
        "base",
        "link",
        "svg",
        "math",
        "frame",
        "frameset",
        "applet",
        "template",
        "portal",
    }
)


def render(text: str) -> str:
    return MD.render(text)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag


def tags(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    parser = _Tags()
    parser.feed(html)
    parser.close()
    return parser.tags


def url_verdict(value: str, allowed: tuple[str, ...]) -> str | None:
    """None when a browser may follow `value`; else why not."""
    if value.lower().startswith("mailto:"):
        domain = value[7:].rpartition("@")[2].split("?")[0]
        canon = parse_http_url("http://" + domain + "/")
        ok = canon.url is not None and host_allowed(canon.host, allowed)
        return None if ok else f"mailto to {domain}"
    if value.startswith("//"):  # protocol-relative: the chat page's scheme, https
        value = "https:" + value
    canon = parse_http_url(value)
    if canon.url is None:
        return f"not a usable http(s) URL: {value!r} ({canon.problem})"
    if canon.problem or not host_allowed(canon.host, allowed):
        return f"host {canon.host!r} not allowed: {value!r}"
    return None


def problems(cleaned: str, allowed: tuple[str, ...]) -> list[str]:
    """What the rendered cleaned text would let a browser do that it must not."""
    found = []
    for tag, attrs in tags(render(cleaned)):
        if tag in FORBIDDEN_TAGS:
            found.append(f"<{tag}> survives")
        for key, value in attrs:
            if key.startswith("on"):
                found.append(f"{key} attribute on <{tag}>")
            elif key == "style":
                found.append(f"style attribute on <{tag}>")
            elif key in URL_ATTRIBUTES and value is not None:
                values = (
                    [p.split()[0] for p in value.split(",") if p.split()]
                    if "srcset" in key
                    else [value]
                )
                for v in values:
                    why = url_verdict(v, allowed)
                    if why:
                        found.append(f"<{tag} {key}>: {why}")
    return found


def rendered_destinations(text: str) -> list[str]:
    """Every URL the rendered text holds in a URL attribute."""
    return [
        v
        for _, attrs in tags(render(text))
        for k, v in attrs
        if k in URL_ATTRIBUTES and v is not None
    ]
