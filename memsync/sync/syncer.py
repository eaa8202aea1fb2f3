"""Bring an index in step with its vault: a pure plan from stats, then apply it file by file.

Text first: every changed file is chunked and written (keyword-searchable) in its own transaction;
vectors for the chunks that lack one are computed afterwards in batches. A crash at any point leaves
an index whose files rows describe exactly the chunks present, and the next run finishes the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import fts, metadata
from ..chunking import CHUNKER, chunk_text
from ..embedders import Embedder
from ..errors import EmbeddingError, VaultError
from ..links.parse import links_in
from ..store.origin import Owner
from ..store.protocols import (
    FileFacts,
    FileRow,
    NewChunk,
    NoteWrite,
    SkipRow,
    StoreReader,
    StoreWriter,
)
from ..text import as_text
from ..vault import FileStat, IgnoreRules, Note, SkipFile, note_at, read_note, scan
from .embedding import Progress, ProgressFactory, embed_pending, text_only

log = logging.getLogger("memsync.sync")

# how notes become rows; an index made under other rules is rebuilt (vectors of unchanged chunks kept)
INDEX_RULES = f"{CHUNKER}; {fts.SPELLING}; {metadata.RULES}"


def rules_current(meta: Mapping[str, str]) -> bool:
    """The index was chunked by this release's rules (else `index` chunks every note again)."""
    return meta.get("chunker") == INDEX_RULES


# notes written per transaction: a transaction (and on PostgreSQL a round trip) per note was most
# of a first index's time; a batch is still all or nothing, so a crash leaves no half note
BATCH_NOTES, BATCH_CHUNKS = 100, 500


@dataclass(frozen=True)
class Plan:
    """What a stat-only comparison of disk and index says to do."""

    to_read: list[str]  # new, or (mtime, size) differs from the files row
    removed: list[str]  # indexed but no longer on disk
    unchanged: int
    still_skipped: list[str] = field(default_factory=list)  # skipped before, not changed since


def plan(
    disk: Mapping[str, FileStat],
    index: Mapping[str, tuple[int, int]],
    skipped: Mapping[str, SkipRow] | None = None,
) -> Plan:
    """Pure: compare stats; equal (mtime, size) means unchanged and the file is never read, be it
    a note or a file skipped for what it holds."""
    to_read, still_skipped = [], []
    unchanged = 0
    skipped = skipped or {}
    for path, st in disk.items():
        skip = skipped.get(path)
        if index.get(path) == (st.mtime_ns, st.size):
            unchanged += 1
        elif skip is not None and (skip.mtime_ns, skip.size) == (st.mtime_ns, st.size):
            still_skipped.append(path)
        else:
            to_read.append(path)
    removed = [path for path in index if path not in disk]
    return Plan(sorted(to_read), sorted(removed), unchanged, sorted(still_skipped))


def match_moves(new_notes: Mapping[str, str], removed: Mapping[str, str]) -> dict[str, str]:
    """Pure: new path -> old path where a removed file's bytes reappear (a rename or a move)."""
    by_hash: dict[str, list[str]] = {}
    for old, digest in sorted(removed.items()):
        by_hash.setdefault(digest, []).append(old)
    moves = {}
    for new, digest in sorted(new_notes.items()):
        olds = by_hash.get(digest)
        if olds:
            moves[new] = olds.pop(0)
    return moves


@dataclass
class Report:
    added: int = 0
    changed: int = 0
    touched: int = 0
    moved: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks_written: int = 0
    embedded: int = 0
    pending: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "added": self.added,
            "changed": self.changed,
            "touched": self.touched,
            "moved": self.moved,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "chunks_written": self.chunks_written,
            "embedded": self.embedded,
            "pending_embeddings": self.pending,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "warnings": [{"path": p, "warning": w} for p, w in self.warnings],
            "seconds": round(self.seconds, 3),
        }


def _new_chunks(note: Note, meta: metadata.NoteMeta) -> list[NewChunk]:
    """The note's chunks; in a note without a `#` heading, its front-matter title stands in front
    of every chunk's embedding input, where a heading path would."""
    chunks = chunk_text(note.text)
    if meta.title and not meta.has_heading:
        chunks = [replace(c, context=meta.title) for c in chunks]
    return [
        NewChunk(
            c.start_line,
            c.end_line,
            c.hash,
            c.text,
            c.context,
            fts.index_text(c.text),
            c.overlap,
            c.window_lines,
        )
        for c in chunks
    ]


def _day(note: Note) -> str:
    """The date a filter sees for a note's current path and text (its path may say it)."""
    return metadata.day_of(metadata.parse(note.path, note.text), note.mtime_ns)


def _facts(note: Note, meta: metadata.NoteMeta) -> FileFacts:
    warnings = [w for w in (note.warning, meta.warning) if w]
    return FileFacts(
        meta.title,
        metadata.day_of(meta, note.mtime_ns),
        meta.tags,
        "; ".join(warnings) or None,
        note.text,
        meta.aliases,
        tuple(links_in(note.path, note.text)),
    )


class Syncer:
    """Applies plans to one store; used by `index` once and by the watcher for every batch.

    `should_stop` is asked between files (each its own transaction): a stopping watcher, or a
    query's refresh giving way to a writer, leaves at once and the next sync finishes the job."""

    def __init__(
        self,
        store: StoreWriter,
        root: Path,
        max_file_bytes: int,
        should_stop: Callable[[], bool] = lambda: False,
        owner: Owner = Owner(),
    ) -> None:
        self.store = store
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.should_stop = should_stop
        self.owner = owner  # whose index this is: another folder is refused (VaultTaken)
        self.rules = IgnoreRules(root)

    def reload_rules(self) -> None:
        """.memsyncignore changed: the next sync applies its new rules."""
        self.rules = IgnoreRules(self.root)

    def sync_all(self, progress: ProgressFactory | None = None) -> Report:
        """A full reconcile: walk and stat everything, read only what changed."""
        report = Report()
        if not self.root.is_dir():  # unmounted or moved: an empty walk must not empty the index
            raise VaultError(f"vault folder not found: {self.root}; the index is left as it is")
        found = scan(self.root, self.rules)
        index = self.store.file_stats()
        meta = self.store.meta()
        facts = self.owner.claim(meta, self.root)
        if not index:
            facts["chunker"] = INDEX_RULES
        if facts:  # recorded before the first file: a run killed midway resumes like any other
            self.store.record(**facts)
            meta.update(facts)
        skips = self.store.skip_rows()
        work = plan(found.files, index, skips)
        rechunk = not rules_current(meta)
        if rechunk:  # the chunking rules changed: every note again (unchanged chunks keep vectors)
            work = Plan(sorted(set(found.files) - set(work.still_skipped)), work.removed, 0)
        update = progress("Reading notes", len(work.to_read)) if progress and work.to_read else None
        report.unchanged += work.unchanged
        kept = [skips[p] for p in work.still_skipped] + [
            SkipRow(s.path, s.reason) for s in found.skipped
        ]
        if set(kept) != set(skips.values()):  # a skipped file that changed is read again below
            self.store.update_skips(kept, replace_all=True)
        report.skipped.extend(sorted((s.path, s.reason) for s in kept))
        if self._apply(work.to_read, work.removed, index, found.files, report, update, rechunk):
            self.store.mark_synced(chunker=INDEX_RULES)
        return report

    def reopen(self, open_store: Callable[[], StoreWriter]) -> None:
        """After a database error: the store opened again (a server may have dropped it)."""
        with contextlib.suppress(Exception):  # a connection the server dropped may not close
            self.store.close()
        self.store = open_store()

    def notes_under(self, folder: str) -> list[str]:
        """The notes on disk below a folder that an event named (a folder created or moved in)."""
        if self.rules.skips_folder(folder):
            return []
        return list(scan(self.root, self.rules, under=folder).files)

    def sync_changes(self, changes: Iterable[tuple[str, bool]]) -> Report | None:
        """The paths events named, as (path, is_folder): a folder stands for the notes indexed
        below it and those on disk below it now. None when there was nothing to check."""
        paths: set[str] = set()
        indexed: list[str] | None = None
        for path, is_folder in dict.fromkeys(changes):  # a burst names the same path many times
            if not is_folder:
                paths.add(path)
                continue
            if indexed is None:
                indexed = list(self.store.file_stats())
            paths.update(p for p in indexed if p.startswith(path + "/"))
            paths.update(self.notes_under(path))
        return self.sync_paths(sorted(paths)) if paths else None

    def sync_paths(self, paths: Iterable[str]) -> Report:
        """Re-check the given paths only (from watcher events), judged by the same rules as a
        walk: stat, then as sync_all."""
        report = Report()
        index = self.store.file_stats()
        skips = self.store.skip_rows()
        disk: dict[str, FileStat] = {}
        new_skips: list[SkipRow] = []
        candidates = sorted(set(paths))
        for path in candidates:
            verdict = note_at(self.root, path, self.rules)
            if isinstance(verdict, FileStat):
                disk[path] = verdict
            elif verdict is not None:
                new_skips.append(SkipRow(verdict.path, verdict.reason))
                report.skipped.append((verdict.path, verdict.reason))
        work = plan(disk, {p: index[p] for p in disk if p in index}, skips)
        report.skipped.extend((p, skips[p].reason) for p in work.still_skipped)
        removed = [p for p in candidates if p in index and p not in disk]
        removed += self._moved_away(disk, index, candidates)
        forget = [
            as_text(p) for p in candidates if as_text(p) in skips and p not in work.still_skipped
        ]
        if new_skips or forget:
            self.store.update_skips(new_skips, forget)
        report.unchanged += work.unchanged
        if self._apply(work.to_read, removed, index, disk, report, None):
            self.store.mark_synced()
        return report

    def _moved_away(
        self, disk: Mapping[str, FileStat], index: Mapping[str, tuple[int, int]], named: list[str]
    ) -> list[str]:
        """Indexed notes no event named, gone from disk, with a new note's (mtime, size): the
        first half of a move whose other event comes later (watchdog pairs a move only within
        one watch, and sends the lone delete half a second after the create). Taken in now, the
        move is one move, never a note listed under both paths."""
        new_stats = {(st.mtime_ns, st.size) for path, st in disk.items() if path not in index}
        if not new_stats:
            return []
        others = set(named)
        return [
            path
            for path, stats in index.items()
            if stats in new_stats and path not in others and not os.path.lexists(self.root / path)
        ]

    def _apply(
        self,
        to_read: list[str],
        removed: list[str],
        index: Mapping[str, tuple[int, int]],
        disk: Mapping[str, FileStat],
        report: Report,
        progress: Progress | None,
        rechunk: bool = False,
    ) -> bool:
        """Read what changed, then move and remove, then write the new text in batches.
        Returns False when it stopped early (should_stop)."""
        self.store.settle_links()  # what a pass that died left held
        hashes = self.store.file_hashes([p for p in to_read if p in index] + removed)
        notes = self._read_changed(to_read, hashes, index, disk, report, progress, rechunk)
        if notes is None:
            return False
        self._move_and_remove(notes, removed, hashes, index, report, progress)
        # more than a batch: their links resolved once, at the end (store.links_held)
        many = len(notes) > BATCH_NOTES
        with self.store.links_held() if many else contextlib.nullcontext():
            if not self._write_notes(notes, index, report, progress):
                return False
        report.pending = self.store.pending_count()
        return True

    def _read_changed(
        self,
        to_read: list[str],
        hashes: Mapping[str, str],
        index: Mapping[str, tuple[int, int]],
        disk: Mapping[str, FileStat],
        report: Report,
        progress: Progress | None,
        rechunk: bool,
    ) -> dict[str, Note] | None:
        """The notes whose text changed; a file that cannot be indexed is recorded as skipped,
        one whose text is the same only touched. None when it stopped early."""
        notes: dict[str, Note] = {}
        for path in to_read:
            if self.should_stop():
                return None
            try:
                note = read_note(self.root, path, self.max_file_bytes)
            except SkipFile as skip:
                report.skipped.append((path, str(skip)))
                st = disk[path]
                row = SkipRow(path, str(skip), *((st.mtime_ns, st.size) if skip.lasting else ()))
                if path in index:
                    self.store.remove_file(path, row)
                    report.removed += 1
                else:
                    self.store.update_skips([row])
                if progress:
                    progress(1)
                continue
            if hashes.get(path) == note.hash and not rechunk:
                day = _day(note)
                self.store.touch_file(FileRow(path, note.hash, note.mtime_ns, note.size), day)
                report.touched += 1
                if progress:
                    progress(1)
                continue
            notes[path] = note
        return notes

    def _move_and_remove(
        self,
        notes: dict[str, Note],
        removed: list[str],
        hashes: Mapping[str, str],
        index: Mapping[str, tuple[int, int]],
        report: Report,
        progress: Progress | None,
    ) -> None:
        """A new note with a removed one's text is that note moved (taken out of `notes`: its
        chunks and vectors move with it); the other removed notes go."""
        fresh = {p: n.hash for p, n in notes.items() if p not in index}
        moves = match_moves(fresh, {p: hashes[p] for p in removed})
        for new, old in moves.items():
            note = notes.pop(new)
            moved = replace(note, path=new)
            self.store.move_file(
                old, FileRow(new, note.hash, note.mtime_ns, note.size), _day(moved)
            )
            report.moved += 1
            if progress:
                progress(1)
        for path in removed:
            if path not in moves.values():
                self.store.remove_file(path)
                report.removed += 1

    def _write_notes(
        self,
        notes: dict[str, Note],
        index: Mapping[str, tuple[int, int]],
        report: Report,
        progress: Progress | None,
    ) -> bool:
        """The notes chunked and written, a batch per transaction; False when it stopped early
        (the batch gathered so far is written first)."""
        batch: list[NoteWrite] = []
        chunks = 0  # in the batch
        for path, note in notes.items():
            if self.should_stop():
                self._write(batch, index, report, progress)
                return False
            meta = metadata.parse(path, note.text)
            facts = _facts(note, meta)
            if facts.warning:
                report.warnings.append((path, facts.warning))
            written = FileRow(path, note.hash, note.mtime_ns, note.size)
            batch.append(NoteWrite(written, _new_chunks(note, meta), facts))
            chunks += len(batch[-1].chunks)
            if len(batch) >= BATCH_NOTES or chunks >= BATCH_CHUNKS:
                self._write(batch, index, report, progress)
                batch, chunks = [], 0
        self._write(batch, index, report, progress)
        return True

    def _write(
        self,
        batch: list[NoteWrite],
        index: Mapping[str, tuple[int, int]],
        report: Report,
        progress: Progress | None,
    ) -> None:
        """A batch of read notes into the index, in one transaction."""
        self.store.replace_files(batch)
        for row, chunks, _ in batch:
            report.chunks_written += len(chunks)
            if row.path in index:
                report.changed += 1
            else:
                report.added += 1
        if progress and batch:
            progress(len(batch))


def index_vault(
    store: StoreWriter,
    root: Path,
    max_file_bytes: int,
    embedder: Embedder | None,
    progress: ProgressFactory | None = None,
    owner: Owner = Owner(),
) -> Report:
    """`memsync index`: reconcile the text, then embed what lacks a vector (unless keyword-only)."""
    started = time.monotonic()
    report = Syncer(store, root, max_file_bytes, owner=owner).sync_all(progress)
    if embedder is not None:
        try:
            done = embed_pending(store, embedder, progress, adopt_new_size=True)
        except EmbeddingError as exc:
            raise text_only(exc, store.pending_count()) from exc
        report.embedded, report.pending = done.embedded, done.pending
    if report.changed or report.removed:
        store.prune_cache()
    report.seconds = time.monotonic() - started
    return report


@dataclass(frozen=True)
class Drift:
    """How the notes on disk differ from the index, by stat alone."""

    files: int
    new: int
    changed: int
    removed: int
    skipped: int  # everything skipped: notes (too large, binary) and other entries (links)
    skipped_notes: int  # of `files`

    @property
    def behind(self) -> int:
        return self.new + self.changed + self.removed


def drift(root: Path, store: StoreReader) -> Drift:
    """A stat-only walk of the vault against the index's files rows; reads no note, writes nothing."""
    found = scan(root, IgnoreRules(root))
    index = store.file_stats()
    skips = store.skip_rows()
    work = plan(found.files, index, skips)
    changed = sum(1 for p in work.to_read if p in index)
    # a skipped file since deleted is still listed as skipped until a sync forgets it
    present = found.files.keys() | {skip.path for skip in found.skipped}
    gone = sum(1 for path in skips if path not in present and path not in index)
    return Drift(
        len(found.files),
        len(work.to_read) - changed,
        changed,
        len(work.removed) + gone,
        len(work.still_skipped) + len(found.skipped),
        len(work.still_skipped),
    )
