"""Names and text as memsync compares and prints them: case-folded for comparing, bytes that are
not UTF-8 as escapes for storing, control characters escaped for a terminal and names escaped so
that they read back exactly; pure, imported by every room that handles a note's name."""

from __future__ import annotations

import os
import re
import unicodedata

NOTE_SUFFIXES = (".md", ".markdown")  # what a note's file name ends in (case-insensitive)


def fold(name: str) -> str:
    """A name as a case-insensitive file system (macOS, Windows) compares it: `Drafts`, `DRAFTS`
    and fullwidth `ＤＲＡＦＴＳ` are one name. Ignore and protect rules compare folded names."""
    if name.isascii():  # nearly every name, and a C-speed path
        return name.lower()
    return unicodedata.normalize("NFKC", name).casefold()


def as_text(rel: str) -> str:
    """A path as text that can be printed and stored: bytes that are not UTF-8 as \\xNN escapes."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


def is_utf8(text: str) -> bool:
    """Whether a name or an argument is text, not the surrogate escapes Python reads bytes that
    are not UTF-8 as (a file name on disk, a word from a terminal in another encoding)."""
    if text.isascii():  # nearly every name, and a C-speed check
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_hidden(char: str) -> bool:
    """A character that a terminal would run, or that draws a name misleadingly: controls
    (newline, tab, escape) and format characters (bidi overrides, zero-width space, BOM); ZWJ and
    ZWNJ are not, since Persian names and emoji need them to join."""
    category = unicodedata.category(char)
    return category == "Cc" or (category == "Cf" and char not in "\u200c\u200d")


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\\": "\\\\"}


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{{{ord(char):x}}}"


def escape_controls(text: str) -> str:
    """Control and format characters of a note's text as escapes (`\\x1b`, `\\r`, `\\u{202e}`;
    tabs kept): a terminal would run them (colours, its title, the clipboard through OSC 52, a
    carriage return or a bidi override that hides or reorders what a line says)."""
    return "".join(_escape(char) if is_hidden(char) and char != "\t" else char for char in text)


def escape_name(name: str) -> str:
    """A note's name as `escape_controls` shows text, its backslashes doubled too, so that
    `unescape_name` gives back exactly this name (a name may hold a backslash on Linux and macOS)."""
    return "".join(_escape(char) if is_hidden(char) or char == "\\" else char for char in name)


_ESCAPED = re.compile(r"\\(?:x([0-9a-f]{2})|u\{([0-9a-f]{1,6})\}|([nr\\]))")
_UNESCAPES = {escape[1]: char for char, escape in _ESCAPES.items()}


def _unescape(match: re.Match[str]) -> str:
    code = match[1] or match[2]
    return chr(int(code, 16)) if code else _UNESCAPES[match[3]]


def unescape_name(text: str) -> str:
    """A name as `escape_name` printed it, back: `memsync get` takes the `path:lines` that
    `query` printed; a backslash that starts no escape stays as it is."""
    return _ESCAPED.sub(_unescape, text)


def split_lines(text: str) -> list[str]:
    """Lines as editors number them: \\n, \\r\\n or \\r end a line; a final newline adds none.
    Not str.splitlines, which also ends one at a form feed, \\x1c-\\x1e, \\x85 or U+2028: the
    chunker's line numbers, which query cites, and those get reads must be the same."""
    if not text:
        return []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
