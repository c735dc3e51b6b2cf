"""An answer's text fields through its one stream session, each field its own paragraphs.

`content`, and with `extra_text: "audit"` the `refusal` and reasoning text, are audited as
one response (what is stored is what the client may see). Where the field changes, the
paragraph held so far is ended (a line end or a blank line is fed), so every audited piece
belongs to one field; the added line ends are part of the stored response but are taken
off what the client receives.
"""

from __future__ import annotations

from audits.api.proxy.fields import EXTRA_TEXT_FIELDS
from audits.intake.stream import Event, StreamSession

Piece = tuple[str, Event]  # (the field, a session event)


class AuditedText:
    def __init__(self, session: StreamSession, *, extra_text: str = "audit") -> None:
        self.session = session
        self.extra = extra_text == "audit"
        self.field: str | None = None
        self.ends_line = True
        self.fields: list[str] = []  # in the order they were audited, for the metadata
        self.dropped: list[str] = []

    async def feed(self, field: str, text: str) -> list[Piece]:
        """Audit `text` of `field`: the pieces now audited, each with its field. A field
        that is not audited (`extra_text: "drop"`) is dropped."""
        if field.partition(".")[0] in EXTRA_TEXT_FIELDS and not self.extra:
            if field.partition(".")[0] not in self.dropped:
                self.dropped.append(field.partition(".")[0])
            return []
        out: list[Piece] = []
        if field != self.field:
            out += await self.boundary()
            self.field = field
            if field not in self.fields:
                self.fields.append(field)
        if text:
            self.ends_line = text.endswith("\n")
            out += [(field, event) for event in await self.session.feed(text)]
        return out

    async def boundary(self) -> list[Piece]:
        """End the paragraph held so far (audit it now): its pieces."""
        if not self.session.pending or self.field is None:
            return []
        added = "\n" if self.ends_line else "\n\n"
        self.ends_line = True
        events = trimmed(await self.session.feed(added), len(added))
        return [(self.field, event) for event in events]

    async def end(self) -> list[Piece]:
        """The text is over: audit what is held."""
        return [(self.field or "content", event) for event in await self.session.end_text()]


def trimmed(events: list[Event], newlines: int) -> list[Event]:
    """`events` without the last `newlines` line ends of their text (the ones we added)."""
    out = list(events)
    for i in range(len(out) - 1, -1, -1):
        if newlines <= 0:
            break
        name, data = out[i]
        if name != "chunk":
            continue
        text = data["text"]
        while newlines and text.endswith("\n"):
            text, newlines = text[:-1], newlines - 1
        if text:
            out[i] = (name, {**data, "text": text})
            break
        out.pop(i)
    return out
