"""One text prepared for the detectors: two byte copies with the text's own offsets.

Python's `re` scans fast only from a literal (it jumps to each occurrence); from a
character class or a look-behind it pays at every position. So the detectors search
byte copies where a literal stands for a whole class: in `shape` every digit is "0",
every capital "A" and every small letter "a", so "a digit" is the literal "0". In `raw`
(for the key formats, which start with literals) each non-ASCII character is one "?",
so offsets in both copies are offsets in the text.
"""

from __future__ import annotations


def _shape_table() -> bytes:
    table = bytearray(b"#" * 256)
    for c in range(256):
        ch = chr(c)
        if ch.isascii() and ch.isdigit():
            table[c] = ord("0")
        elif ch.isascii() and ch.isupper():
            table[c] = ord("A")
        elif ch.isascii() and ch.islower():
            table[c] = ord("a")
        elif ch in " -._()+/:@\n":
            table[c] = c
        elif ch in "\t\r\f\v":
            table[c] = ord(" ")
    return bytes(table)


_SHAPE = _shape_table()
# Key characters ([A-Za-z0-9_-]) as "a", every other byte as a space.
_KEY_CHARS = bytes(
    ord("a") if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_-") else ord(" ")
    for c in range(256)
)


class Scan:
    """`text` and its byte copies (`raw`, `shape`), made once per text."""

    __slots__ = ("text", "raw", "shape", "digits")

    def __init__(self, text: str) -> None:
        self.text = text
        self.raw = text.encode("ascii", "replace")
        self.shape = self.raw.translate(_SHAPE)
        self.digits = self.shape.count(b"0")

    def has_key_run(self, length: int) -> bool:
        """Whether the text holds `length` key characters in a row."""
        return b"a" * length in self.raw.translate(_KEY_CHARS)

    def apart(self, start: int, end: int, joiners: str = "") -> bool:
        """Whether `text[start:end]` stands alone: no letter, digit or "_" touches it, nor
        one of `joiners` with a digit beyond (`1-` before a number or `-1` after it make it
        part of a longer one)."""
        return not (
            self._joined(start - 1, -1, joiners) or (end > start and self._joined(end, 1, joiners))
        )

    def _joined(self, i: int, step: int, joiners: str) -> bool:
        text = self.text
        if i < 0 or i >= len(text):
            return False
        c = text[i]
        if c.isalnum() or c == "_":
            return True
        beyond = i + step
        return c in joiners and 0 <= beyond < len(text) and text[beyond].isdigit()
