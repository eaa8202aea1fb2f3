"""Which note a link opens, pure, by the rules of Obsidian's "Internal links" help: a wikilink
with a path matches that path from the vault root; a Markdown link's path is tried relative to
the linking note, then from the root; a path never falls back to a bare name; a bare name
matches a note's file name without its extension, case-folded and NFC-normalised; of several
notes sharing a name, the one in the linking note's folder, then the shortest path, then the
first by path. An alias names its note for `get`, `links` and queries, never for a written link."""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ..vault import NOTE_SUFFIXES
from .parse import Link, inside_vault


def key(text: str) -> str:
    """How names compare: NFC (macOS stores names decomposed), then case-folded."""
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


@dataclass(frozen=True)
class Wanted:
    """What a link asks the index for: a note by file name, by path (keys in order of
    preference), or the linking note itself."""

    by: str  # "name", "path" or "self"
    keys: tuple[str, ...]


def wanted(source: str, link: Link) -> Wanted:
    target = link.target
    if not target:
        return Wanted("self", (path_key(source),))
    if link.style == "markdown":
        tried = [] if target.startswith("/") else [inside_vault(source, target)]
        root = posixpath.normpath(target.lstrip("/"))
        tried.append(None if root.startswith("../") or root == ".." else root)
        return Wanted("path", tuple(dict.fromkeys(path_key(p) for p in tried if p)))
    if "/" in target:
        return Wanted("path", (path_key(target),))
    return Wanted("name", (name_key(target),))


def pick(source: str, candidates: Sequence[str]) -> str | None:
    """Of the notes a bare name matches, the one a link from `source` opens."""
    if not candidates:
        return None
    folder = posixpath.dirname(source)
    beside = sorted(c for c in candidates if posixpath.dirname(c) == folder)
    if beside:
        return beside[0]
    return min(candidates, key=lambda path: (len(path), path))


def resolve(source: str, want: Wanted, found: dict[str, list[str]]) -> str | None:
    """The note `want` opens, given `found`: each of its keys -> the notes it matches (by file
    name or by path, as `want.by` says)."""
    if want.by == "self":
        return source
    if want.by == "path":
        for wanted_key in want.keys:
            if found.get(wanted_key):
                return sorted(found[wanted_key])[0]
        return None
    return pick(source, found.get(want.keys[0], []))
