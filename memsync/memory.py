"""The library face: index a vault, and search, read, list, report on and (for an agent) write
one vault's index. The CLI and the MCP server are each parse -> one call here -> render, and a
future command (an HTTP server, `memsync write`) reuses the same calls; the watcher is its own room.

A one-shot query opens the index, answers and closes; the MCP server keeps it open (vectors in
memory, the query embedder loaded once) and sees the watcher's changes through SQLite's
data_version. Before answering, a query brings a local index's text up to date when no writer
keeps it fresh (stat-only when nothing changed); a shared index is written by its writer only.
An agent's write is indexed before the write returns.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import notes
from .config import RELATED_LIMIT as RELATED_LIMIT  # re-exported: the faces' default
from .config import Config, current, data_dir, is_postgres
from .embedders import Embedder, embedder_for_index, make_embedder, make_reranker, resolve_provider
from .errors import (
    ArgumentError,
    IndexNotFound,
    LockError,
    MemsyncError,
    NoSuchNote,
    StoreError,
    VaultTaken,
)
from .filters import note_filter as note_filter  # re-exported: the faces read dates with it
from .filters import path_globs
from .metadata import note_date
from .notes import MOST_LINKS, Backlink, Named, NoteLinks, checked_path, note_path, note_request
from .notes import Lines as Lines  # re-exported: the faces name what read() returns
from .notes import NoteRequest as NoteRequest  # re-exported: the faces parse with it
from .search.options import SAMPLE_CHUNKS, Options
from .search.request import (
    MAX_QUERY_CHARS,
    SearchRequest,
    checked_text,
    search_options,
    search_request,
)
from .status import gather, glance, indexes_here, vault_facts, vaults_in
from .store.locate import (
    Location,
    SqliteLocation,
    check_writer,
    for_vault,
    locate,
    owner_of,
    to_forget,
)
from .store.lock import QUERY_REFRESH, WATCHERS
from .store.origin import Origin, this_host
from .store.protocols import LinkRow, ModelKey, NoteRow, StoreWriter
from .sync.embedding import ProgressFactory
from .sync.syncer import Report, Syncer, drift, index_vault
from .text import split_lines
from .vault import IgnoreRules, vault_root

if TYPE_CHECKING:
    from .embedders import Reranker
    from .search.pipeline import Answer
    from .search.related import Related
    from .sync.watcher import Watcher

__all__ = [
    "Indexed",
    "Memory",
    "index",
    "note_request",
    "search_options",
    "search_request",
    "SearchRequest",
    "MAX_QUERY_CHARS",
    "vaults",
    "forget",
]

log = logging.getLogger("memsync.memory")


@dataclass(frozen=True)
class Serving:
    """What a daemon answers a relayed command for: its index, and the watcher of that daemon
    that writes it (None: a reader's)."""

    location: Location
    watcher: Watcher | None = None


# set by a daemon answering for its own index only: a command that means another one is declined
serving_only: ContextVar[Serving | None] = ContextVar("memsync_serving_only", default=None)


class NotServedHere(Exception):
    """A daemon was asked about an index it does not serve: the client answers it itself. Not a
    MemsyncError: no user ever sees it."""


def _served(location: Location | None) -> None:
    only = serving_only.get()
    if only is not None and location != only.location:
        raise NotServedHere(str(location))


WRITE_SYNC_WAIT = 5.0  # seconds an agent's write waits for a running watcher to index it


@dataclass(frozen=True)
class Indexed:
    vault: Path
    db: str  # the index, safe to show
    model: str | None  # the embedder that ran, as it describes itself
    report: Report


def index(
    config: Config,
    vault: Path,
    *,
    replace_vault: bool = False,
    progress: ProgressFactory | None = None,
    notice: Callable[[str], None] = lambda message: None,
) -> Indexed:
    """`memsync index`: the whole vault, text first, then vectors; refused (VaultTaken) before
    anything is written when the index belongs to another folder. In a daemon answering for
    the index, its watcher does the work (_by_its_watcher)."""
    root = vault_root(vault)
    location = for_vault(root, config)
    _served(location)
    owner = check_writer(location, root, replace_vault)
    chosen = resolve_provider(config)
    if chosen == "none" and config.provider == "auto":
        notice("the local model is not installed here; indexing for keyword search only")
    embedder = make_embedder(config, chosen)
    if serving_only.get() is None:
        with location.writer_lock("index"), location.open(create=True) as store:
            report = index_vault(store, root, config.max_file_bytes, embedder, progress, owner)
            two_scripts = _in_two_scripts(store)
    else:
        report = _by_its_watcher(config, root, location, embedder, replace_vault, progress)
        with location.open() as store:  # read only: the watcher's thread writes it
            two_scripts = _in_two_scripts(store)
    if two_scripts:
        _prepare_glossary(notice, wrote=bool(report.added or report.changed or report.moved))
    return Indexed(root, str(location), embedder.describe() if embedder else None, report)


def _by_its_watcher(
    config: Config,
    root: Path,
    location: Location,
    embedder: Embedder | None,
    replace_vault: bool,
    progress: ProgressFactory | None,
) -> Report:
    """`index` in a daemon answering for the index: done by the watcher of this process that
    writes it, when that would do just what the command asks (the same folder, model and largest
    note). Declined (NotServedHere) for anything else: no watcher here, --replace, progress bars
    for a terminal (a relayed answer is shown whole, at its end), a watcher that is stopping;
    the client then runs it in its own process, which finds the index locked and says by whom."""
    serving = serving_only.get()
    watcher = serving.watcher if serving is not None else None
    report = None
    if (
        watcher is not None
        and watcher.root == root
        and watcher.config.max_file_bytes == config.max_file_bytes
        and _model_of(watcher.embedder) == _model_of(embedder)
        and not replace_vault
        and progress is None
    ):
        report = watcher.index_now()
    if report is None:
        raise NotServedHere(str(location))
    return report


def _model_of(embedder: Embedder | None) -> ModelKey | None:
    return embedder.key if embedder is not None else None


def _in_two_scripts(store: StoreWriter) -> bool:
    return {"latin", "cjk"} <= store.sample_scripts(SAMPLE_CHUNKS)


def _prepare_glossary(notice: Callable[[str], None], wrote: bool) -> None:
    """A vault of Chinese and English notes: the glossary its questions across scripts read,
    built now (once per machine) rather than in the middle of the first such question. A run
    that wrote no note is content with a glossary of these rules found by its file's name: the
    installed dictionary's version, which names the file exactly, takes importlib.metadata."""
    from .search.glossary import built_in, cached_path, shared_glossary  # two scripts only

    folder = data_dir()
    if not wrote and built_in(folder):
        return
    path = cached_path(folder)
    if path is not None and not path.exists():
        notice("building the Chinese-English glossary for questions across scripts (once)")
    shared_glossary(folder)


def lists_vaults(config: Config) -> bool:
    """`status` with a PostgreSQL --db and no --name lists the database's vaults."""
    return bool(config.db and is_postgres(config.db) and not config.name)


def vaults(config: Config) -> dict[str, Any]:
    """The vaults of a PostgreSQL --db, else this user's indexes in the data folder."""
    _served(None)  # a list of vaults is no daemon's index
    return vaults_in(config.db) if config.db and is_postgres(config.db) else indexes_here()


def forget(
    config: Config, target: str, confirm: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """Remove the index TARGET names (never a note) once `confirm` agrees, seeing what it holds;
    its facts, or None where `confirm` said no."""
    _served(None)
    location, name = to_forget(config, target)
    facts = vault_facts(location, name)  # an index that cannot be read may be forgotten too
    if not confirm(facts):
        return None
    location.forget()
    return facts


def unindexed(config: Config, vault: Path) -> bool:
    """Whether a local vault has no index yet where its writer would keep it (a lock file left
    beside it is no index)."""
    location = for_vault(vault_root(current().path(vault)), config)
    return isinstance(location, SqliteLocation) and not location.path.exists()


def _named_vault(vault: Path) -> Path:
    """A reader's --vault: the folder, or its real path where it is gone (moved, deleted, a
    drive not mounted), which still names its index: a reader answers from it."""
    path = current().path(vault)
    return vault_root(path) if path.exists() else Path(os.path.realpath(path))


class Memory:
    """One vault's index, opened for answering: search, read, tree, status, and an agent's write."""

    def __init__(self, config: Config, location: Location, *, long_lived: bool = False) -> None:
        self.config = config
        self.location = location
        self.store = location.open(vectors_in_memory=long_lived)
        self._embedder: tuple[ModelKey | None, Embedder | None, str] | None = None
        self._rerank: Reranker | None = None

    @classmethod
    def open(cls, config: Config, vault: Path | None = None, *, long_lived: bool = False) -> Memory:
        """The index a reading command means: --db/--name, --vault, the vault around the current
        folder, or the only one (IndexNotFound/AmbiguousIndex say which exist)."""
        location = locate(config, _named_vault(vault) if vault else None)
        _served(location)
        return cls(config, location, long_lived=long_lived)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @property
    def origin(self) -> Origin:
        return Origin.of(self.store.meta())

    @property
    def vault(self) -> Path | None:
        """The vault's folder where this machine is the vault's host; None elsewhere, where a
        folder at the same path is not the vault."""
        origin = self.origin
        return Path(origin.path) if origin.path and origin.here(self.location.shared) else None

    def vault_root(self) -> Path:
        """The vault, for reading and writing notes; IndexNotFound if it is not here now."""
        origin = self.origin
        if origin.path and not origin.here(self.location.shared):
            raise IndexNotFound(
                f"the vault of {self.location} is {origin.where()}, not on this machine: its "
                "notes are read there"
            )
        root = Path(origin.path) if origin.path else None
        if root is None or not root.is_dir():
            raise IndexNotFound(
                f"the vault of {self.location} is not there now ({root}): is it mounted?"
            )
        return root

    def read(
        self, path: object, start: int | None = None, end: int | None = None, *, capped: bool = True
    ) -> Lines:
        """Lines of a note; `path` is untrusted (an agent's or a user's): it must name a note
        inside the vault that memsync indexes. On the vault's host the file is read now (it is
        fresher); elsewhere, or where the file or the whole folder is gone, the indexed copy
        (its Lines say which copy and when), never a folder that merely sits at the vault's
        path. `capped`: one agent-sized read."""
        rel = note_path(path)
        root = self.vault
        if root is not None and root.is_dir():
            rules = IgnoreRules(root)
            if rules.skips_path(rel) or os.path.lexists(root / rel):  # the file, or its refusal
                rel = checked_path(root, path, rules)
                max_bytes = self.config.max_file_bytes
                return notes.read_lines(root, rel, start, end, max_bytes, capped=capped)
        indexed = self.store.indexed_text(rel)
        if indexed is None:
            raise NoSuchNote(
                f"no note at {rel} in the index of {self.location}: give its path inside the "
                "vault, as query prints it"
            )
        text, when = indexed
        stamp = datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M") if when else "?"
        copy = f"the indexed copy, indexed at {stamp}"
        if root is not None and not root.is_dir():
            copy += f"; the vault folder {root} is not there now"
        return notes.lines_of(rel, text, start, end, capped, copy)

    def read_location(self, request: NoteRequest, *, capped: bool = True) -> Lines:
        """The lines a request for a note asks for, the same on every face: a link's note, section
        or block; else the first reading of its path that names a note (NoteRequest.readings),
        or why the likeliest one cannot be read."""
        if request.is_link:
            named = self.read_named(request.written, capped=capped)
            if named is not None:
                return named
        missing: NoSuchNote | None = None
        for number, (path, start, end) in enumerate(request.readings()):
            try:
                return self.read(path, start, end, capped=capped)
            except NoSuchNote as refused:
                missing = missing or refused
            except MemsyncError:
                if number == 0:  # the likeliest reading names a note that refuses: say why
                    raise
                # a later reading is a guess: its refusal says less than the first "no note"
        assert missing is not None  # else the first reading returned or raised
        raise missing

    def read_named(self, location: str, *, capped: bool = True) -> Lines | None:
        """`[[Note]]`, `[[Note#Heading]]` or `[[Note#^block]]`, an alias accepted: the note's
        lines, that heading's section or that block's, numbered as in the file; None when
        `location` is not one wikilink."""
        if "[[" not in location:  # a path: the links room is not even imported
            return None
        from .links import sections

        named = notes.named_note(self.store, location)
        if named is None:
            return None
        if named.anchor is None:
            return self.read(named.path, capped=capped)
        whole = self.read(named.path, capped=False)
        found = sections.section(whole.text, named.anchor)
        if found is None:
            raise ArgumentError(sections.missing(whole.path, named.anchor, whole.text))
        return notes.lines_of(whole.path, whole.text, *found, capped, whole.copy)

    def links(self, note: str) -> NoteLinks:
        """A note's links in the order it writes them, and the lines of other notes that link
        to it; the note given by path or as `[[name]]`."""
        named = notes.named_note(self.store, note) or Named(self._indexed(note))
        notes.needs_links(self.store)
        outgoing = self.store.outgoing_links(named.path)
        backlinks = self.store.backlinks(named.path)
        more = [
            f"the first {MOST_LINKS:,} of {len(found):,} {kind}"
            for kind, found in (("links", outgoing), ("backlinks", backlinks))
            if len(found) > MOST_LINKS
        ]
        texts: dict[str, list[str]] = {}
        for link in backlinks[:MOST_LINKS]:
            if link.source not in texts:
                texts[link.source] = self._lines_of(link.source)
        listed = [
            Backlink(link, _line_at(texts[link.source], link.line))
            for link in backlinks[:MOST_LINKS]
        ]
        return NoteLinks(named.path, outgoing[:MOST_LINKS], listed, "; ".join(more))

    def unresolved_links(self) -> list[LinkRow]:
        """Every link that opens no note, by linking note and line."""
        notes.needs_links(self.store)
        return self.store.unresolved_links()

    def ambiguous_links(self) -> list[LinkRow]:
        """Every link by a bare name that several notes share, none in the linking note's
        folder, with the note it opens, by linking note and line."""
        notes.needs_links(self.store)
        return self.store.ambiguous_links()

    def _indexed(self, note: str) -> str:
        rel = note_path(note)
        if not self.store.file_hashes([rel]):
            raise ArgumentError(
                f"no note at {rel} in the index of {self.location}: give its path inside the "
                "vault, as query prints it, or [[its name]]"
            )
        return rel

    def _lines_of(self, path: str) -> list[str]:
        """A note's lines as indexed, which its links' line numbers count in."""
        indexed = self.store.indexed_text(path)
        return split_lines(indexed[0]) if indexed else []

    def tree(self, folder: str = "") -> tuple[str, list[tuple[str, int, int, int]]]:
        """The indexed notes under a folder ('' = the vault) as (path, size, mtime_ns, chunks):
        what is indexed, never ignored or hidden files."""
        if any(ch in folder for ch in "*?["):
            raise ArgumentError("memory_tree takes a folder, not a glob")
        globs = path_globs([folder])  # refuses '..', absolute paths; (folder, folder/*) or nothing
        where = globs[0] if globs else ""
        return where, self.store.listing(where)

    def notes_page(self, after: str, limit: int) -> list[NoteRow]:
        """The indexed notes after the path `after`, `limit` at most, in path order."""
        return self.store.note_page(after, limit)

    def daily_notes(self, first: str, last: str) -> list[tuple[str, int]]:
        """The daily notes (daily/ or memory/ YYYY-MM-DD.md) dated first..last (YYYY-MM-DD,
        inclusive) by their names, oldest first, with their sizes in bytes."""
        stats = self.store.file_stats()
        dated = [(note_date(path), path, size) for path, (_, size) in stats.items()]
        days = [(day.isoformat(), path, size) for day, path, size in dated if day]
        return [(path, size) for day, path, size in sorted(days) if first <= day <= last]

    def paths(self, prefix: str = "") -> list[str]:
        """Indexed note paths starting with `prefix` (shell completion)."""
        return [row[0] for row in self.store.listing() if row[0].startswith(prefix)]

    def status(self) -> dict[str, Any]:
        """What `memsync status --json` says."""
        return gather(self.location, self.store)

    def glance(self) -> dict[str, Any]:
        """A few of status's facts (the model, notes, chunks, the writer, the last sync),
        without a walk of the vault: what a page's header shows."""
        return glance(self.location, self.store)

    def write(
        self, content: object, path: str | None, mode: str, protect: Sequence[str] = ()
    ) -> dict[str, Any]:
        """An agent's write: append (to today's daily note when no path is given, created with a
        heading), create or replace; atomic, refused for protected, read-only and look-alike
        notes, and indexed before it returns. Only where the vault is (its host)."""
        self.check_writable_here()
        text = notes.check_content(content)
        root = self.vault_root()
        today = date.today().isoformat()
        rules = IgnoreRules(root)
        rel = checked_path(root, path or f"daily/{today}.md", rules, existing=False)
        notes.check_writable(rel, tuple(protect))
        heading = f"# {today}" if path is None else ""
        written = notes.write_note(root, rel, text, mode, heading, tuple(protect))
        return {
            "path": rel,
            "start_line": written.start_line,
            "end_line": written.end_line,
            "citation": notes.citation(rel, written.start_line, written.end_line),
            "indexed": self._index_written(rel, written.sha256),
        }

    def search(self, text: str, options: Options) -> Answer:
        """What `memsync query` prints: `ranked`, then `reranked`."""
        return self.reranked(self.ranked(text, options), options)

    def ranked(self, text: str, options: Options) -> Answer:
        """The part of a search that reads the index: the text refreshed first, the index's own
        model for the query, and every reason a leg did not run among the notices; with a
        reranker, the candidates `reranked` orders. The text is checked as every face's request
        is (search.request.checked_text)."""
        checked_text(text)
        stale = self._refreshed()
        embedder, why = (None, "")
        if options.mode != "keyword":
            embedder, why = self._query_embedder()
        from .search.pipeline import ranked  # the search side: an index never loads it

        to_rerank = options.rerank and self._reranker() is not None
        answer = ranked(self.store, text, options, embedder, why, to_rerank, self._writer)
        index_notices = [notice for notice in (stale, self.store.behind) if notice]
        return replace(answer, notices=[*answer.notices, *index_notices])

    def related(self, request: NoteRequest, options: Options) -> Related:
        """The notes nearest in meaning to a note (or to the lines of it a request names), from
        what the index holds: its text refreshed first, as before a search; the note located as
        `get` locates it (NoSuchNote, ArgumentError)."""
        stale = self._refreshed()
        lines = self.read_location(request, capped=False)
        from .search.related import related  # the search side: an index never loads it

        whole = request.whole_note
        span = None if whole else (lines.start_line, lines.end_line)
        answer = related(self.store, lines.path, lines.text, span, options)
        index_notices = [notice for notice in (stale, self.store.behind) if notice]
        return replace(answer, notices=[*answer.notices, *index_notices])

    def _refreshed(self) -> str:
        """Before answering from the index: its text brought up to date where no writer keeps
        it fresh; a notice where it could not be, or lags the notes."""
        root = self.vault
        if root is not None and not root.is_dir():  # moved, deleted, a drive not mounted
            return (
                f"the vault folder {root} is not there now: results are from the index as last "
                "synced"
            )
        if root is not None and self.location.shared:  # written by its writer only
            return behind_notice(self.store, self.location, root)
        if root is not None:
            return refresh_text(self.store, self.location, root, self.config.max_file_bytes)
        return ""

    def _writer(self) -> str | None:
        """The command writing the index now (the writer lock's role), if any."""
        holder = self.location.holder()
        return holder.get("role") if holder else None

    def reranked(self, answer: Answer, options: Options) -> Answer:
        """`ranked`'s answer in the reranker's order, cut to the limit; it reads no index, so
        a server can answer other calls while the reranker thinks."""
        from .search.pipeline import reranked

        reranker = self._reranker() if options.rerank else None
        return answer if reranker is None else reranked(answer, options, reranker)

    def check_writable_here(self) -> None:
        """An agent may write only where the vault is: on its host (VaultTaken elsewhere)."""
        origin = self.origin
        if origin.path and not origin.here(self.location.shared):
            raise VaultTaken(
                f"--writable: the vault of {self.location} is {origin.where()}, not on "
                f"{this_host()}: run memsync mcp --writable there, or without --writable here"
            )

    def _reranker(self) -> Reranker | None:
        """Made once: a long-lived server keeps its connection to the reranker."""
        if self._rerank is None:
            self._rerank = make_reranker(self.config)
        return self._rerank

    def _query_embedder(self) -> tuple[Embedder | None, str]:
        """Loaded once per model: a long-lived server must not reload it for every query."""
        key = self.store.model_key()
        if self._embedder is None or self._embedder[0] != key:
            embedder, why = embedder_for_index(self.config, key, self.location.shared)
            self._embedder = (key, embedder, why)
        return self._embedder[1], self._embedder[2]

    def _index_written(self, rel: str, digest: str) -> bool:
        """Index a note just written, before the write returns: under the writer lock when nobody
        holds it, else by waiting (WRITE_SYNC_WAIT at most) for the watcher to see it. True when
        the index holds the note whose bytes hash to `digest`."""
        holder = self.location.holder()
        if holder is None or holder.get("role") not in WATCHERS:
            try:
                with self.location.writer_lock("mcp-write"):
                    self.store.upgrade()
                    root, max_bytes = self.vault_root(), self.config.max_file_bytes
                    owner = owner_of(self.location)
                    Syncer(self.store, root, max_bytes, owner=owner).sync_paths([rel])
            except LockError:
                pass  # an index run or a watcher that just started: it will see the file
            except MemsyncError as exc:  # the note is written; say it is not indexed
                log.warning("wrote %s but could not index it: %s", rel, exc)
                return False
        deadline = time.monotonic() + WRITE_SYNC_WAIT
        while True:
            if self.store.file_hashes([rel]).get(rel) == digest:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


# before answering: what the face does about an index that may lag its notes


def _line_at(lines: list[str], number: int) -> str:
    return lines[number - 1] if 0 < number <= len(lines) else ""


def behind_notice(store: StoreWriter, location: Location, root: Path) -> str:
    """A reader of a shared index on the vault's host never writes it: it says how far the index
    is behind the notes, unless a writer is at work on it."""
    behind = drift(root, store).behind
    if not behind or location.holder() is not None:
        return ""
    notes = "1 note" if behind == 1 else f"{behind} notes"
    return (
        f"{notes} changed on disk since the index was written: memsync watch (or memsync index) "
        "on this machine brings it up to date"
    )


def refresh_text(store: StoreWriter, location: Location, root: Path, max_file_bytes: int) -> str:
    """Before a query: if no watcher keeps this index fresh, sync the text (stat-only when nothing
    changed; never embeds). Returns a notice when the index could not be refreshed."""
    if store.read_only:
        return "the index is read-only for this user, so it was not refreshed; results may be stale"
    try:
        lock = location.writer_lock(QUERY_REFRESH).acquire()
    except LockError:
        return ""  # a watcher (or an index run) is keeping it fresh
    except StoreError as exc:  # no lock file can be made beside the index
        return f"could not check the vault for changes ({exc}); results may be stale"
    try:
        store.upgrade()  # a reader opens an older schema as it is; under the lock it migrates
        Syncer(store, root, max_file_bytes, owner=owner_of(location)).sync_all()
        return ""
    except Exception as exc:  # noqa: BLE001 - a read-only index or vault must still answer queries
        return f"could not bring the index up to date ({exc}); results may be stale"
    finally:
        lock.release()
