"""The links table and the names of notes, in SQL both engines read alike: each note's links
as written, each resolved to the note it opens (links.resolve's rules) when it is written, and
again when a note it could name appears, goes or moves. A reader of an index without them says so."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..links.parse import Link
from ..links.resolve import Wanted, key, name_key, path_key, resolve, wanted
from .protocols import LinkRow, NoteWrite
from .sql_statements import Statements

_LINK_COLUMNS = "source, line, written, target, anchor, kind, resolved"


class LinkTables(Statements):
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
        self._relink(self._wanting(paths))

    def _links_gone(self, path: str) -> None:
        """A note left the index: its names and links go, and the links it opened look again."""
        opened = self._opening([path])
        self._forget([path])
        self._relink(opened)

    def _links_moved(self, old: str, new: str) -> None:
        """A note renamed: its links come along (a relative one may open another note from its
        new folder), links that opened it look again, as do those that may open it now."""
        opened = self._opening([old])
        aliases = [a for (a,) in self._rows(
            "SELECT name FROM names WHERE path = ? AND kind = 'alias'", (old,)
        )]  # fmt: skip
        own = [(new, _as_link(row)) for row in self._link_rows("source = ?", (old,))]
        self._forget([old, new])
        self._name([(new, alias) for alias in aliases], [new])
        self._insert_links(own)
        self._relink(opened | self._wanting([new]))

    def _forget(self, paths: Sequence[str]) -> None:
        rows = [(p,) for p in paths]
        self._run_many("DELETE FROM names WHERE path = ?", rows)
        self._run_many("DELETE FROM links WHERE source = ?", rows)

    def _name(self, aliases: Iterable[tuple[str, str]], paths: Sequence[str]) -> None:
        """Each note's names: its file name, its path and its aliases."""
        rows = [(p, "file", p, name_key(p)) for p in paths]
        rows += [(p, "path", p, path_key(p)) for p in paths]
        rows += [(p, "alias", alias, key(alias)) for p, alias in aliases]
        self._run_many("INSERT INTO names(path, kind, name, key) VALUES(?,?,?,?)", rows)

    def _insert_links(self, links: Sequence[tuple[str, Link]]) -> None:
        wants = [(source, wanted(source, link)) for source, link in links]
        opens = self._resolved(set(wants))
        self._run_many(
            "INSERT INTO links(source, seq, line, written, target, anchor, kind, style, wants, "
            "want_key, alt_key, resolved) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
            [(source, seq, link.line, link.written, link.target, link.anchor, link.kind,
              link.style, want.by, *_keys(want), opens[source, want])
             for seq, ((source, link), (_, want)) in enumerate(zip(links, wants))],
        )  # fmt: skip

    def _wanting(self, paths: Sequence[str]) -> set[tuple[str, Wanted]]:
        """The links of other notes that name one of these notes' file names or paths."""
        keys = {name_key(p) for p in paths} | {path_key(p) for p in paths}
        found = self._batches(
            "SELECT DISTINCT source, wants, want_key, alt_key FROM links "
            "WHERE want_key IN ({marks})",
            list(keys),
        )
        alternative = self._batches(
            "SELECT DISTINCT source, wants, want_key, alt_key FROM links WHERE alt_key IN ({marks})",
            list(keys),
        )
        return {_wanted(row) for row in [*found, *alternative]}

    def _opening(self, paths: Sequence[str]) -> set[tuple[str, Wanted]]:
        rows = self._batches(
            "SELECT DISTINCT source, wants, want_key, alt_key FROM links WHERE resolved IN ({marks})",
            paths,
        )
        return {_wanted(row) for row in rows}

    def _relink(self, wants: set[tuple[str, Wanted]]) -> None:
        """These links resolved again against the notes indexed now."""
        opens = self._resolved(wants)
        self._run_many(
            "UPDATE links SET resolved = ? WHERE source = ? AND wants = ? AND want_key = ? "
            "AND coalesce(alt_key, '') = ?",
            [(opens[source, want], source, want.by, *_keys(want, "")) for source, want in wants],
        )

    def _resolved(self, wants: set[tuple[str, Wanted]]) -> dict[tuple[str, Wanted], str | None]:
        """The note each link opens, from the names table."""
        found = {
            by: self.notes_named(kind, [k for _, want in wants if want.by == by for k in want.keys])
            for kind, by in (("file", "name"), ("path", "path"))
        }
        return {
            (source, want): resolve(source, want, found.get(want.by, {})) for source, want in wants
        }

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

    def notes_named(self, kind: str, keys: Sequence[str]) -> dict[str, list[str]]:
        """key -> the notes whose file name, path or alias (`kind`: file, path, alias) it is."""
        found: dict[str, list[str]] = {}
        for name, path in self._batches(
            "SELECT key, path FROM names WHERE kind = ? AND key IN ({marks})", keys, kind
        ):
            found.setdefault(name, []).append(path)
        return {name: sorted(paths) for name, paths in found.items()}

    def aliases(self, paths: Sequence[str]) -> dict[str, list[str]]:
        """Each note's aliases as its front matter writes them."""
        found: dict[str, list[str]] = {}
        if not self.has_links:
            return found
        for path, name in self._batches(
            "SELECT path, name FROM names WHERE kind = 'alias' AND path IN ({marks})", paths
        ):
            found.setdefault(path, []).append(name)
        return found


def _keys(want: Wanted, missing: str | None = None) -> tuple[str, str | None]:
    return want.keys[0], want.keys[1] if len(want.keys) > 1 else missing


def _wanted(row: tuple[Any, ...]) -> tuple[str, Wanted]:
    source, by, first, second = row
    return source, Wanted(by, (first, second) if second else (first,))


def _as_link(row: LinkRow) -> Link:
    return Link(row.line, row.written, row.target, row.anchor, row.kind, row.style)
