"""What a link asks for, pure, by the rules of Obsidian's "Internal links" help: a wikilink with
a path asks for that path from the vault root; a Markdown link's path is tried relative to the
linking note, then from the root (one without a folder is a name, as Obsidian writes its
shortest links); a path never falls back to a bare name; a bare name asks for
a note's file name without its extension, case-folded and NFC-normalised. Which of several notes
sharing a name opens (the one in the linking note's folder, then the shortest path, then the
first by path) is the store's one statement (store.sql_links). An alias names its note for
`get`, `links` and queries, never for a written link."""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Iterable
from typing import NamedTuple

from ..text import NOTE_SUFFIXES
from .parse import Link, inside_vault


def key(text: str) -> str:
    """How names compare: NFC (macOS stores names decomposed), then case-folded."""
    if text.isascii():  # most names: NFC leaves them as they are, and lower() is casefold()
        return text.lower()
    return unicodedata.normalize("NFC", text).casefold()


def without_suffix(name: str) -> str:
    lowered = name.lower()
    for suffix in NOTE_SUFFIXES:
        if lowered.endswith(suffix):
            return name[: -len(suffix)]
    return name


def path_key(path: str) -> str:
    """A note's path as a link with a path names it: `Projects/Heron.md` -> `projects/heron`."""
    return key(without_suffix(path.strip("/")))


def name_key(path: str) -> str:
    """A note's file name as a bare link names it: `projects/Heron.md` -> `heron`."""
    return key(without_suffix(posixpath.basename(path)))


# the key of a path that climbs out of the vault (a moved note's relative link may): path_key
# strips slashes, so no note has it and the link opens nothing
NOWHERE = "/"


class Wanted(NamedTuple):
    """What a link asks the index for: a note by file name, by path (keys in order of
    preference), or the linking note itself."""

    by: str  # "name", "path" or "self"
    keys: tuple[str, ...]


def wanted(source: str, link: Link) -> Wanted:
    target = link.target
    if not target:
        return Wanted("self", (path_key(source),))
    if link.style == "markdown" and "/" not in target:
        # `[t](note.md)`: Obsidian's shortest form, which opens the note of that name (the one
        # beside the linking note first, then the shortest path: the root's)
        return Wanted("name", (name_key(target),))
    if link.style == "markdown":
        tried = [] if target.startswith("/") else [inside_vault(source, target)]
        root = posixpath.normpath(target.lstrip("/"))
        tried.append(None if root.startswith("../") or root == ".." else root)
        keys = tuple(dict.fromkeys(path_key(p) for p in tried if p))
        return Wanted("path", keys or (NOWHERE,))
    if "/" in target:
        return Wanted("path", (path_key(target),))
    return Wanted("name", (name_key(target),))


def names_of(path: str, aliases: Iterable[str]) -> list[tuple[str, ...]]:
    """A note's rows of names: its file name, its path and its aliases, each with its key."""
    folder = posixpath.dirname(path)
    named = [("file", path, name_key(path)), ("path", path, path_key(path))]
    named += [("alias", alias, key(alias)) for alias in aliases]
    return [(path, folder, *name) for name in named]
