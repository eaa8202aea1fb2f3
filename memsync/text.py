"""Names as text: how a name is compared (case-folded) and shown (bytes that are not UTF-8 as
escapes); pure, imported by every room that handles a note's name."""

from __future__ import annotations

import os
import unicodedata


def fold(name: str) -> str:
    """A name as a case-insensitive file system (macOS, Windows) compares it: `Drafts`, `DRAFTS`
    and fullwidth `ＤＲＡＦＴＳ` are one name. Ignore and protect rules compare folded names."""
    if name.isascii():  # nearly every name, and a C-speed path
        return name.lower()
    return unicodedata.normalize("NFKC", name).casefold()


def shown(rel: str) -> str:
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
