"""Bring an index in step with its vault: a pure plan from stats, then apply it file by file.

Text first: every changed file is chunked and written (keyword-searchable) in its own transaction;
vectors for the chunks that lack one are computed afterwards in batches. A crash at any point leaves
an index whose files rows describe exactly the chunks present, and the next run finishes the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import fts
from .chunking import CHUNKER, chunk_text, embed_input
from .embedders import Embedder, to_blob
from .errors import EmbeddingError, VaultError
from .store import FileRow, NewChunk, Store
from .vault import FileStat, IgnoreRules, Note, SkipFile, read_note, scan, stat_note

log = logging.getLogger("memsync.sync")

# how notes become rows; an index made under other rules is rebuilt (vectors of unchanged chunks kept)
INDEX_RULES = f"{CHUNKER}; {fts.SPELLING}"

Progress = Callable[[int], None]
# opens a progress display for (label, total) and returns its update function
ProgressFactory = Callable[[str, int], Progress]


@dataclass(frozen=True)
class Plan:
    """What a stat-only comparison of disk and index says to do."""

    to_read: list[str]  # new, or (mtime, size) differs from the files row
    removed: list[str]  # indexed but no longer on disk
    unchanged: int


def plan(disk: Mapping[str, FileStat], index: Mapping[str, FileRow]) -> Plan:
    """Pure: compare stats; equal (mtime, size) means unchanged and the file is never read."""
    to_read = []
    unchanged = 0
    for path, st in disk.items():
        row = index.get(path)
        if row is not None and row.mtime_ns == st.mtime_ns and row.size == st.size:
            unchanged += 1
        else:
            to_read.append(path)
    removed = [path for path in index if path not in disk]
    return Plan(sorted(to_read), sorted(removed), unchanged)


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


def _new_chunks(note: Note) -> list[NewChunk]:
    return [
        NewChunk(c.start_line, c.end_line, c.hash, c.text, c.context, fts.index_text(c.text))
        for c in chunk_text(note.text)
    ]


class Syncer:
    """Applies plans to one store; used by `index` once and by the watcher for every batch."""

    def __init__(self, store: Store, root: Path, max_file_bytes: int) -> None:
        self.store = store
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.rules = IgnoreRules(root)

    def sync_all(self, report: Report, progress: ProgressFactory | None = None) -> None:
        """A full reconcile: walk and stat everything, read only what changed."""
        if not self.root.is_dir():  # unmounted or moved: an empty walk must not empty the index
            raise VaultError(f"vault folder not found: {self.root}; the index is left as it is")
        found = scan(self.root, self.rules)
        index = self.store.file_rows()
        work = plan(found.files, index)
        rechunk = self.store.meta().get("chunker") != INDEX_RULES and bool(index)
        if rechunk:  # the chunking rules changed: every note again (unchanged chunks keep vectors)
            work = Plan(sorted(found.files), work.removed, 0)
        update = progress("Reading notes", len(work.to_read)) if progress and work.to_read else None
        report.unchanged += work.unchanged
        skips = [(s.path, s.reason) for s in found.skipped]
        if sorted(skips) != self.store.skipped():
            self.store.record_skips(skips, replace_all=True)
        report.skipped.extend((s.path, s.reason) for s in found.skipped)
        self._apply(work.to_read, work.removed, index, report, update, rechunk)
        self.store.mark_synced(str(self.root), chunker=INDEX_RULES)

    def notes_under(self, folder: str) -> list[str]:
        """The notes on disk below a folder that an event named (a folder created or moved in)."""
        if self.rules.skips_folder(folder):
            return []
        return list(scan(self.root, self.rules, under=folder).files)

    def sync_paths(self, paths: Iterable[str], report: Report) -> None:
        """Re-check the given paths only (from watcher events): stat, then as sync_all."""
        index = self.store.file_rows()
        disk: dict[str, FileStat] = {}
        candidates = sorted(set(paths))
        for path in candidates:
            if self.rules.skips_path(path):
                continue
            st = stat_note(self.root, path)
            if st is not None:
                disk[path] = st
        to_read = plan(disk, {p: index[p] for p in disk if p in index}).to_read
        removed = [p for p in candidates if p in index and p not in disk]
        report.unchanged += len(disk) - len(to_read)
        self._apply(to_read, removed, index, report, None)
        self.store.mark_synced()

    def _apply(
        self,
        to_read: list[str],
        removed: list[str],
        index: Mapping[str, FileRow],
        report: Report,
        progress: Progress | None,
        rechunk: bool = False,
    ) -> None:
        notes: dict[str, Note] = {}
        for path in to_read:
            try:
                note = read_note(self.root, path, self.max_file_bytes)
            except SkipFile as skip:
                report.skipped.append((path, str(skip)))
                log.warning("skipped %s: %s", path, skip)
                if path in index:
                    self.store.remove_file(path, skipped_reason=str(skip))
                    report.removed += 1
                else:
                    self.store.record_skips([(path, str(skip))], replace_all=False)
                if progress:
                    progress(1)
                continue
            row = index.get(path)
            if row is not None and row.hash == note.hash and not rechunk:
                self.store.touch_file(FileRow(path, note.hash, note.mtime_ns, note.size))
                report.touched += 1
                if progress:
                    progress(1)
                continue
            notes[path] = note

        fresh = {p: n.hash for p, n in notes.items() if p not in index}
        moves = match_moves(fresh, {p: index[p].hash for p in removed})
        for new, old in moves.items():
            note = notes.pop(new)
            self.store.move_file(old, FileRow(new, note.hash, note.mtime_ns, note.size))
            report.moved += 1
            if progress:
                progress(1)
        for path in removed:
            if path not in moves.values():
                self.store.remove_file(path)
                report.removed += 1

        for path, note in notes.items():
            if note.warning:
                report.warnings.append((path, note.warning))
                log.warning("%s: %s", path, note.warning)
            chunks = _new_chunks(note)
            self.store.replace_file(FileRow(path, note.hash, note.mtime_ns, note.size), chunks)
            report.chunks_written += len(chunks)
            if path in index:
                report.changed += 1
            else:
                report.added += 1
            if progress:
                progress(1)
        report.pending = self.store.pending_count()


def embed_pending(
    store: Store,
    embedder: Embedder,
    report: Report,
    progress: ProgressFactory | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> None:
    """Give every chunk without a vector one, cache first, then the model, a batch at a time."""
    key = embedder.key
    if store.model_key() != key or store.dims() is None:
        sample = store.pending_chunks(1, any_chunk=True)
        if not sample:
            return
        _, _, context, text = sample[0]
        probe = embedder.embed_documents([embed_input(context, text)])
        store.set_model(key, int(probe.shape[1]))  # a new model: every old vector goes
    dims = store.dims() or 0
    total = store.pending_count()
    update = progress("Embedding chunks", total) if progress and total else None
    while not should_stop():
        batch = store.pending_chunks(embedder.batch_size)  # small: a watcher stops between batches
        if not batch:
            break
        blobs = store.cached_embeddings(key, [h for _, h, _, _ in batch])
        missing = {h: embed_input(c, t) for _, h, c, t in batch if h not in blobs}
        if missing:
            vectors = embedder.embed_documents(list(missing.values()))
            blobs.update(zip(missing, (to_blob(v) for v in vectors)))
        stored = store.store_embeddings(key, [(i, h, blobs[h]) for i, h, _, _ in batch], dims)
        report.embedded += stored
        if update:
            update(len(batch))
        if stored == 0 and store.model_key() != key:
            break  # someone switched the model under us; stop rather than loop
    report.pending = store.pending_count()


def index_vault(
    store: Store,
    root: Path,
    max_file_bytes: int,
    embedder: Embedder | None,
    progress: ProgressFactory | None = None,
) -> Report:
    """`memsync index`: reconcile the text, then embed what lacks a vector (unless keyword-only)."""
    started = time.monotonic()
    report = Report()
    syncer = Syncer(store, root, max_file_bytes)
    syncer.sync_all(report, progress)
    if embedder is not None:
        try:
            embed_pending(store, embedder, report, progress)
        except EmbeddingError as exc:
            raise type(exc)(
                f"{exc}. The text is indexed (keyword search works); {store.pending_count()} "
                "chunks still need vectors: run memsync index again"
            ) from exc
    if report.changed or report.removed:
        store.prune_cache()
    report.seconds = time.monotonic() - started
    return report


def refresh_text(store: Store, db: Path, root: Path, max_file_bytes: int) -> str:
    """Before a query: if no watcher keeps this index fresh, sync the text (stat-only when nothing
    changed; never embeds). Returns a notice when the index could not be refreshed."""
    from .errors import LockError
    from .lock import WriterLock

    try:
        lock = WriterLock(db, "query-refresh").acquire()
    except LockError:
        return ""  # a watcher (or an index run) is keeping it fresh
    except OSError as exc:
        return f"could not check the vault for changes ({exc.strerror}); results may be stale"
    try:
        Syncer(store, root, max_file_bytes).sync_all(Report())
        return ""
    except Exception as exc:  # noqa: BLE001 - a read-only index or vault must still answer queries
        return f"could not bring the index up to date ({exc}); results may be stale"
    finally:
        lock.release()
