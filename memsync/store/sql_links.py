"""The links table and the names of notes, in SQL both engines read alike: each note's links
as written, each resolved to the note it opens when it is written, and again when a note it
could name appears, goes or moves. links.resolve says what a link asks for; which note answers
is `_BY_PATH` and `_BY_NAME` here, one statement for many links at once."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..links.parse import Link, links_in
from ..links.resolve import names_of, wanted
from .protocols import LinkRow, NoteWrite
from .sql_statements import BATCH, Statements, marks

_LINK_COLUMNS = "source, line, written, target, anchor, kind, resolved"
_NAME_COLUMNS = "path, folder, kind, name, key"
# a link as written and what it asks for (links.resolve): held so, then resolved into `links`
_HELD_COLUMNS = (
    "source, folder, seq, line, written, target, anchor, kind, style, wants, want_key, alt_key"
)
# The note a link opens (Obsidian's rules, links.resolve): by path, the first of its keys that a
# note's path matches (relative to the linking note, then from the root); by file name, the note
# in the linking note's folder, then the shortest path, then the first by path. An alias, which
# no written link opens, is chosen among its notes the same way for `get` and `links`. {want},
# {alt} and {folder} are the link's keys and its note's folder: the columns of a links row being
# resolved again (_OF_THE_ROW) or of a held one moving in (_OF_HELD), or parameters (_AS_PARAMETERS).
_BY_PATH = (
    "SELECT n.path FROM names AS n WHERE n.kind = 'path' AND (n.key = {want} OR n.key = {alt}) "
    "ORDER BY n.key = {want} DESC LIMIT 1"
)
_BY_NAME = (
    "SELECT n.path FROM names AS n WHERE n.kind = '{kind}' AND n.key = {want} "
    "ORDER BY n.folder = {folder} DESC, length(n.path), n.path{code_points} LIMIT 1"
)


def _columns_of(table: str) -> dict[str, str]:
    return {"want": f"{table}.want_key", "alt": f"{table}.alt_key", "folder": f"{table}.folder"}


_OF_THE_ROW, _OF_HELD = _columns_of("links"), _columns_of("held_links")
_AS_PARAMETERS = {"want": "CAST(? AS TEXT)", "alt": "CAST(? AS TEXT)", "folder": "CAST(? AS TEXT)"}


def _parameters(by: str, keys: Sequence[str], folder: str) -> tuple[str | None, ...]:
    """What _AS_PARAMETERS takes for a link asking `by` (path, or a name) for `keys`."""
    want, alt = _keys(keys)
    return (want, alt, want) if by == "path" else (want, folder)


def _keys(keys: Sequence[str]) -> tuple[str, str | None]:
    """A link's key, and the one tried after it (a Markdown path's from the root), if any."""
    return keys[0], keys[1] if len(keys) > 1 else None


class LinkTables(Statements):
    CODE_POINTS = ""  # what orders text by code point on the engine (not PostgreSQL's locale)

    @property
    def has_links(self) -> bool:
        """Whether the index holds links (an older release's does not, until its writer runs)."""
        return self._has("links")

    # -- the writer's half, inside the transactions of sql_tables ---------------------------

    _holding = False  # within links_held()

    @contextmanager
    def links_held(self) -> Iterator[None]:
        """Within it, each batch's links wait in the held tables, committed with their notes,
        and are resolved and written together when it ends: a pass of many notes writes the
        links table and its indexes once, not once per batch (random keys made each batch
        rewrite most of their pages). A pass that stops short leaves them for settle_links."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        self.settle_links()

    def settle_links(self) -> None:
        """The links held by a pass that did not end (a crash), resolved and written now."""
        if not self._rows("SELECT 1 FROM held_names LIMIT 1"):
            return
        with self.transaction():
            self._settle()

    def _write_links(self, notes: Sequence[NoteWrite]) -> None:
        """The notes' names and links, replacing what they had, with the other notes' links
        that may open one of them now; held instead within links_held()."""
        self._hold([(note.row.path, note.facts.aliases, note.facts.links) for note in notes])
        if not self._holding:
            self._settle()

    def _links_gone(self, path: str) -> None:
        """A note left the index: its names and links go, and the links it opened look again."""
        self._forget("= ?", [path])
        self._relink("resolved IN ({marks})", [path])

    def _links_moved(self, old: str, new: str) -> None:
        """A note renamed (its files row already under `new`): its links read again from its
        text at its new place (a relative Markdown link may now open another note, climb out of
        the vault, or come back in), links that opened it look again, as do those that may open
        it now."""
        aliases = [a for (a,) in self._rows(
            "SELECT name FROM names WHERE path = ? AND kind = 'alias'", (old,)
        )]  # fmt: skip
        [(text,)] = self._rows(
            f"SELECT {self._column('files.text')} FROM files WHERE path = ?", (new,)
        )
        own = (
            links_in(new, text)
            if text is not None  # an older release's row keeps no text: its links as they were
            else [_as_link(row) for row in self._link_rows("source = ?", (old,))]
        )
        self._forget("= ?", [old])
        self._hold([(new, aliases, own)])
        self._settle()
        self._relink("resolved IN ({marks})", [old])

    def _hold(self, notes: Sequence[tuple[str, Sequence[str], Sequence[Link]]]) -> None:
        """Notes' names, and their links as written with what each asks for, not resolved."""
        links: list[tuple[Any, ...]] = []
        for path, _, own in notes:
            folder = posixpath.dirname(path)
            for seq, link in enumerate(own):
                want = wanted(path, link)
                links.append((path, folder, seq, link.line, link.written, link.target,
                              link.anchor, link.kind, link.style, want.by, *_keys(want.keys)))  # fmt: skip
        self._name(
            "held_names", [row for path, aliases, _ in notes for row in names_of(path, aliases)]
        )
        self._run_many(
            f"INSERT INTO held_links({_HELD_COLUMNS}) VALUES({marks(_HELD_COLUMNS.count(',') + 1)})",
            links,
        )

    def _settle(self) -> None:
        """The held notes' names and links in place of what they had, in a few statements of
        sets: the other notes' links that may open one of them now resolved again first (the
        held ones are resolved as they move in)."""
        self._forget("IN (SELECT path FROM held_names)", [])
        self._run_many(
            f"INSERT INTO names({_NAME_COLUMNS}) SELECT {_NAME_COLUMNS} FROM held_names", [()]
        )
        held = "(SELECT key FROM held_names WHERE kind = '{kind}')"
        self._relink(f"want_key IN {held.format(kind='file')}", by="name")
        self._relink(
            f"want_key IN {held.format(kind='path')} OR alt_key IN {held.format(kind='path')}",
            by="path",
        )
        into = f"INSERT INTO links({_HELD_COLUMNS}, resolved) SELECT {_HELD_COLUMNS}, "
        self._run_many(into + "source FROM held_links WHERE wants = 'self'", [()])
        for by in ("path", "name"):
            opens = self._opens(by, _OF_HELD)
            self._run_many(f"{into}({opens}) FROM held_links WHERE wants = '{by}'", [()])
        self._run_many("DELETE FROM held_links", [()])
        self._run_many("DELETE FROM held_names", [()])

    def _forget(self, path_is: str, values: Sequence[str]) -> None:
        """The names and links of the notes whose path `path_is` (`= ?`, `IN (...)`)."""
        self._run_many(f"DELETE FROM names WHERE path {path_is}", [values])
        self._run_many(f"DELETE FROM links WHERE source {path_is}", [values])

    def _name(self, table: str, rows: Sequence[tuple[str, ...]]) -> None:
        self._run_many(f"INSERT INTO {table}({_NAME_COLUMNS}) VALUES(?,?,?,?,?)", rows)

    def _relink(self, where: str, values: Sequence[str] = (), by: str | None = None) -> None:
        """The links `where` picks (`{marks}` filled with `values`, if any), of those asking
        `by` (or all), resolved again against the notes indexed now."""
        parts = [values[start : start + BATCH] for start in range(0, len(values), BATCH)] or [[]]
        for kind in (by,) if by else ("path", "name"):
            opens = self._opens(kind, _OF_THE_ROW)
            for part in parts:
                self._run_many(  # a row that would keep its note is not written again
                    f"UPDATE links SET resolved = ({opens}) WHERE wants = '{kind}' AND "
                    f"({where.format(marks=marks(len(part)))}) AND resolved IS DISTINCT FROM "
                    f"({opens})",
                    [part],
                )

    def _opens(self, by: str, wants: dict[str, str]) -> str:
        """The note a link asking `by` opens (path, name: a file name, or alias), over `wants`."""
        if by == "path":
            return _BY_PATH.format(**wants)
        kind = "file" if by == "name" else by
        return _BY_NAME.format(kind=kind, code_points=self.CODE_POINTS, **wants)

    def open_named(self, by: str, keys: Sequence[str], folder: str = "") -> str | None:
        """The note a link from `folder` asking `by` ("name", "path") for `keys` opens: what a
        user or an agent names as a link would."""
        rows = self._rows(
            f"SELECT ({self._opens(by, _AS_PARAMETERS)})", _parameters(by, keys, folder)
        )
        return rows[0][0] if rows else None

    # -- the reader's half ------------------------------------------------------------------

    def _link_rows(self, where: str, args: Sequence[Any]) -> list[LinkRow]:
        rows = self._rows(f"SELECT {_LINK_COLUMNS}, style, seq FROM links WHERE {where}", args)
        return [LinkRow(*row) for row in sorted(rows, key=lambda r: (r[0], r[1], r[8]))]

    def outgoing_links(self, path: str) -> list[LinkRow]:
        """The note's links in the order it writes them."""
        return self._link_rows("source = ?", (path,))

    def backlinks(self, path: str) -> list[LinkRow]:
        """The links of every note that open this one, by linking note and line."""
        return self._link_rows("resolved = ?", (path,))

    def unresolved_links(self) -> list[LinkRow]:
        """Every link that opens no note."""
        return self._link_rows("resolved IS NULL", ())

    def ambiguous_links(self) -> list[LinkRow]:
        """Every bare name that several notes share, none of them beside the linking note: the
        links whose note Obsidian's rules leave to a tie-break (shortest path, then first)."""
        return self._link_rows(
            "wants = 'name' AND resolved IS NOT NULL AND want_key IN (SELECT key FROM names "
            "WHERE kind = 'file' GROUP BY key HAVING count(*) > 1) AND NOT EXISTS (SELECT 1 "
            "FROM names AS n WHERE n.kind = 'file' AND n.key = links.want_key AND n.folder = "
            "links.folder)",
            (),
        )

    def link_counts(self) -> tuple[int, int]:
        """(links, links that open no note)."""
        [(total, broken)] = self._rows(
            "SELECT (SELECT count(*) FROM links), "
            "(SELECT count(*) FROM links WHERE resolved IS NULL)"
        )
        return int(total), int(broken)

    def note_names(self, paths: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Each note's names besides its file name, as (kind, name): its title, its aliases."""
        found: dict[str, list[tuple[str, str]]] = {}
        title = self._column("files.title")
        for path, name in self._batches(
            f"SELECT path, {title} FROM files WHERE path IN ({{marks}}) AND {title} IS NOT NULL",
            paths,
        ):
            found.setdefault(path, []).append(("title", name))
        if self.has_links:
            for path, name in self._batches(
                "SELECT path, name FROM names WHERE kind = 'alias' AND path IN ({marks})", paths
            ):
                found.setdefault(path, []).append(("alias", name))
        return found


def _as_link(row: LinkRow) -> Link:
    return Link(row.line, row.written, row.target, row.anchor, row.kind, row.style)
