"""The note a user or an agent names (a path, or `[[name]]` as a link would write it, an alias
accepted), and a note's links and backlinks as `links` and memory_links give them."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from ..store.protocols import LinkRow, StoreReader
from .parse import wikilink_location
from .resolve import key, name_key, path_key

MOST_LINKS = 500  # listed by one answer of each kind: memory_tree's bound


@dataclass(frozen=True)
class Named:
    """A note as named: its path, and the heading or block asked for."""

    path: str
    anchor: str | None = None


def needs_links(store: StoreReader) -> None:
    if not store.has_links:
        raise ArgumentError(
            "this index was made by an older memsync and holds no links yet: the vault's "
            "writer must run memsync index or watch first"
        )


def named_note(store: StoreReader, text: str) -> Named | None:
    """`[[Note]]`, `[[folder/Note#Heading]]`, `[[alias]]`: the note it names (None when the
    text is not one wikilink); ArgumentError when no note has that name. Of several notes of one
    name, the one a link from the vault's root would open."""
    asked = wikilink_location(text)
    if asked is None:
        return None
    target, anchor = asked
    if not target:
        raise ArgumentError(f"{text} names no note: give [[Note#Heading]] or a path")
    needs_links(store)
    by, wanted = ("path", path_key(target)) if "/" in target else ("name", name_key(target))
    found = store.open_named(by, [wanted]) or store.open_named("alias", [key(target)])
    if found:
        return Named(found, anchor)
    raise ArgumentError(
        f"no note named {target!r} in the index (by file name, path or alias): memsync query "
        "--files finds notes by their words"
    )


@dataclass(frozen=True)
class Backlink:
    link: LinkRow
    text: str  # the linking line


@dataclass(frozen=True)
class NoteLinks:
    path: str
    outgoing: list[LinkRow]
    backlinks: list[Backlink]
    more: str = ""  # what was left out, beyond MOST_LINKS of a kind
