"""The links table and the names of notes, in SQL both engines read alike: each note's links
as written, each resolved to the note it opens when it is written, and again when a note it
could name appears, goes or moves. links.resolve says what a link asks for; which note answers
is `_BY_PATH` and `_BY_NAME` here, one statement for many links at once."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from typing import Any

from ..links.parse import Link
from ..links.resolve import key, name_key, path_key, wanted
from .protocols import LinkRow, NoteWrite
from .sql_statements import BATCH, Statements, marks

_LINK_COLUMNS = "source, line, written, target, anchor, kind, resolved"
# The note a link opens (Obsidian's rules, links.resolve): by path, the first of its keys that a
# note's path matches (relative to the linking note, then from the root); by file name, the note
# in the linking note's folder, then the shortest path, then the first by path. An alias, which
# no written link opens, is chosen among its notes the same way for `get` and `links`. {want},
# {alt} and {folder} are the link's keys and its note's folder: the columns of a links row being
# resolved again (_OF_THE_ROW), or the parameters of a row being inserted (_AS_PARAMETERS).
_BY_PATH = (
    "SELECT n.path FROM names AS n WHERE n.kind = 'path' AND (n.key = {want} OR n.key = {alt}) "
    "ORDER BY n.key = {want} DESC LIMIT 1"
)
_BY_NAME = (
    "SELECT n.path FROM names AS n WHERE n.kind = '{kind}' AND n.key = {want} "
    "ORDER BY n.folder = {folder} DESC, length(n.path), n.path{code_points} LIMIT 1"
)
_OF_THE_ROW = {"want": "links.want_key", "alt": "links.alt_key", "folder": "links.folder"}
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

    def _write_links(self, notes: Sequence[NoteWrite]) -> None:
        """The notes' names and links, replacing what they had; then the other notes' links
        that may open one of them now."""
        paths = [note.row.path for note in notes]
        self._forget(paths)
        self._name(
            [(note.row.path, alias) for note in notes for alias in note.facts.aliases], paths
        )
        self._insert_links([(note.row.path, link) for note in notes for link in note.facts.links])
        self._relink_wanting(paths)

    def _links_gone(self, path: str) -> None:
        """A note left the index: its names and links go, and the links it opened look again."""
        self._forget([path])
        self._relink("resolved IN ({marks})", [path])

    def _links_moved(self, old: str, new: str) -> None:
        """A note renamed: its links come along (a relative one may open another note from its
        new folder), links that opened it look again, as do those that may open it now."""
        aliases = [a for (a,) in self._rows(
            "SELECT name FROM names WHERE path = ? AND kind = 'alias'", (old,)
        )]  # fmt: skip
        own = [(new, _as_link(row)) for row in self._link_rows("source = ?", (old,))]
        self._forget([old, new])
        self._name([(new, alias) for alias in aliases], [new])
        self._insert_links(own)
        self._relink("resolved IN ({marks})", [old])
        self._relink_wanting([new])

    def _forget(self, paths: Sequence[str]) -> None:
        rows = [(p,) for p in paths]
        self._run_many("DELETE FROM names WHERE path = ?", rows)
        self._run_many("DELETE FROM links WHERE source = ?", rows)

    def _name(self, aliases: Iterable[tuple[str, str]], paths: Sequence[str]) -> None:
        """Each note's names: its file name, its path and its aliases."""
        rows = [(p, posixpath.dirname(p), "file", p, name_key(p)) for p in paths]
        rows += [(p, posixpath.dirname(p), "path", p, path_key(p)) for p in paths]
        rows += [(p, posixpath.dirname(p), "alias", a, key(a)) for p, a in aliases]
        self._run_many("INSERT INTO names(path, folder, kind, name, key) VALUES(?,?,?,?,?)", rows)

    def _insert_links(self, links: Sequence[tuple[str, Link]]) -> None:
        """The links, each resolved as it is written."""
        rows: dict[str, list[tuple[Any, ...]]] = {"path": [], "name": [], "self": []}
        for seq, (source, link) in enumerate(links):
            want = wanted(source, link)
            folder = posixpath.dirname(source)
            written = (source, folder, seq, link.line, link.written, link.target, link.anchor,
                       link.kind, link.style, want.by, *_keys(want.keys))  # fmt: skip
            if want.by == "self":
                rows["self"].append((*written, source))
            else:
                rows[want.by].append((*written, *_parameters(want.by, want.keys, folder)))
        into = (
            "INSERT INTO links(source, folder, seq, line, written, target, anchor, kind, style, "
            "wants, want_key, alt_key, resolved) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,"
        )
        self._run_many(into + "?)", rows["self"])
        for by in ("path", "name"):
            self._run_many(f"{into}({self._opens(by, _AS_PARAMETERS)}))", rows[by])

    def _relink(self, where: str, values: Sequence[str]) -> None:
        """The links `where` picks (`{marks}` filled with `values`) resolved again against the
        notes indexed now."""
        for by in ("path", "name"):
            opens = self._opens(by, _OF_THE_ROW)
            for start in range(0, len(values), BATCH):
                part = values[start : start + BATCH]
                self._run_many(  # a row that would keep its note is not written again
                    f"UPDATE links SET resolved = ({opens}) WHERE wants = '{by}' AND "
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

    def _relink_wanting(self, paths: Sequence[str]) -> None:
        """The links that name one of these notes' file names or paths, resolved again."""
        keys = sorted({name_key(p) for p in paths} | {path_key(p) for p in paths})
        self._relink("want_key IN ({marks})", keys)
        self._relink("alt_key IN ({marks})", keys)

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
        """Every link that opens no note, and every bare name that several notes share."""
        return self._link_rows(
            "resolved IS NULL OR (wants = 'name' AND want_key IN (SELECT key FROM names "
            "WHERE kind = 'file' GROUP BY key HAVING count(*) > 1))",
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
