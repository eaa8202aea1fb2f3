"""`memsync watch`: watchdog events -> debounced batches of paths -> the same sync as `index`.

The watcher is a speed-up, not the source of truth: it starts with a full reconcile, reconciles
again on a timer and whenever events may have been lost (inotify overflow, an observer error), and
otherwise re-checks only the paths that events named. Text is written first, by this thread; a
second thread computes vectors in the background and backs off while the provider is down. A
`memsync index` of the same index, relayed from this user's shell, is a full reconcile asked of
this thread (`index_now`): the writer lock stays with the watcher.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..config import Config
from ..embedders import Embedder, make_embedder
from ..errors import EmbeddingError, LockError, MemsyncError, StoreError
from ..store.locate import Location, check_writer, for_vault, owner_of
from ..store.origin import Owner
from ..text import escape_controls
from ..vault import IGNORE_FILE, vault_root
from .debounce import Debouncer
from .embedding import EmbeddingWorker
from .events import (
    FLOOD,
    RELOAD,
    RESCAN,
    REWATCH,
    VAULT_LOST,
    Change,
    EventSink,
    Item,
    OverflowAlarm,
    Reconcile,
)
from .syncer import Report, Syncer
from .watch_plan import subfolders, watch_roots

log = logging.getLogger("memsync.watch")

MAX_BATCH_WAIT = 2.0  # seconds: a steady stream of events still gets applied this often
STOP_CHECK = 0.25  # seconds between looks at the stop flag while idle
STOP_GRACE = 1.0  # seconds a stopping watcher waits for the embedding batch in flight
MAX_PENDING = 10_000  # distinct paths a batch keeps; past that it is a full reconcile
MAX_BACKLOG = 256  # inotify reads watchdog may hold unparsed; past that they are dropped
FLOOD_LOG_EVERY = 60.0  # seconds between two log lines about a flood of events


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a folder, None when none is there."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None


class Watcher:
    def __init__(
        self,
        root: Path,
        location: Location,
        config: Config,
        embedder: Embedder | None,
        retry_base: float = 5.0,
        owner: Owner | None = None,
        command: str = "watch",
        max_pending: int = MAX_PENDING,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self.retry_base = retry_base
        self.max_pending = max_pending
        self.max_backlog = max_backlog
        self._flood_logged = float("-inf")  # when a flood was last logged
        self.owner = owner or owner_of(location)
        self.root = root
        self.location = location
        self.config = config
        self.embedder = embedder
        self.stop = threading.Event()
        self.changes: queue.Queue[Item] = queue.Queue()
        self.lock = location.writer_lock(command)  # status names the command that writes
        self._observer: object | None = None
        self._watches: dict[tuple[str, bool], Any] = {}  # (folder, recursive) -> watchdog's watch
        self._watched_vault: tuple[int, int] | None = None  # the folder the watches are on
        self._vault_gone = False
        self._embedding: EmbeddingWorker | None = None
        self.ready = threading.Event()

    @classmethod
    def for_vault(
        cls, config: Config, vault: Path, replace: bool = False, command: str = "watch"
    ) -> Watcher:
        """`memsync watch VAULT` (or `serve VAULT`: `command`): its index, refused (VaultTaken)
        before anything is written when it belongs to another folder; the configured embedder."""
        root = vault_root(vault)
        location = for_vault(root, config)
        owner = check_writer(location, root, replace)
        return cls(root, location, config, make_embedder(config), owner=owner, command=command)

    # -- lifecycle -------------------------------------------------------------------------------

    @staticmethod
    def _say_what_waits(waiting: int, embedder: Embedder) -> None:
        """Before a backlog is embedded (an index made with provider none has all its chunks
        waiting: 78,597 for Obsidian's help in 26 languages, hours of a core), say so and how
        to keep the index keyword-only."""
        if waiting:
            log.info(
                "%d chunks wait for vectors: embedding them with %s %s in the background "
                '(keyword search finds them meanwhile; provider = "none" keeps the index '
                "keyword-only)",
                waiting,
                embedder.provider,
                embedder.model,
            )

    def run(self) -> None:
        """Blocks until stop is set; the writer lock is held throughout."""
        self.lock.acquire()
        log.info("watching %s (index %s, pid %d)", self.root, self.location, os.getpid())
        alarm = OverflowAlarm(self.changes)
        watchdog_log = logging.getLogger("watchdog")
        watchdog_log.addHandler(alarm)
        abandoned = False
        try:
            syncer = Syncer(
                self.location.open(create=True),
                self.root,
                self.config.max_file_bytes,
                should_stop=self.stop.is_set,
                owner=self.owner,
            )
            try:
                sink = EventSink(self.root, syncer.rules, self.changes)
                self._start_observer(sink)
                try:
                    self._reconcile(syncer, "start")
                    if self.embedder is not None:
                        self._say_what_waits(syncer.store.pending_count(), self.embedder)
                        self._embedding = EmbeddingWorker(
                            self.location,
                            self.embedder,
                            self.stop,
                            self.retry_base,
                            self.lock.update,
                        )
                        self._embedding.start()
                    self.ready.set()
                    self._loop(syncer, sink)
                finally:
                    self.stop.set()  # a relayed index still waiting declines
                    self._stop_observer()
                    abandoned = self._stop_embedding()
                waiting = syncer.store.pending_count() if self.embedder is not None else 0
                if waiting:
                    log.info("%d chunks still wait for vectors; the next run embeds them", waiting)
            finally:
                syncer.store.close()
        finally:
            watchdog_log.removeHandler(alarm)
            if not abandoned:  # else the process exit frees the lock, after the thread's last write
                self.lock.release()

    def _stop_embedding(self) -> bool:
        """Give the embedding thread a moment; a batch still computing holds nothing committed,
        so it is abandoned (the thread is a daemon). True if it was."""
        thread = self._embedding
        if thread is None:
            return False
        self.stop.set()
        thread.wake.set()
        thread.join(timeout=STOP_GRACE)
        if thread.is_alive():
            log.info("left an embedding batch unfinished to stop promptly")
            return True
        self._embedding = None
        return False

    def _start_observer(self, sink: EventSink) -> None:
        """Watch the vault's indexed folders (watch_plan.watch_roots): hidden and ignored folders get
        no inotify watch, so a .git/objects or node_modules cannot exhaust the user's limit."""
        from watchdog.observers import Observer

        observer = Observer()
        observer.start()
        self._observer = observer
        self._watches = {}
        self._watched_vault = _folder_identity(self.root)
        if not self._rewatch(sink):
            log.error("cannot watch %s: reconciling every minute instead", self.root)
            self._stop_observer()

    def _rewatch(self, sink: EventSink) -> bool:
        """Bring the watches to the plan for the folders now on disk and the rules now in force
        (at start, and after folders appear, go or become ignored). New watches are made before
        old ones go, so no event falls between. A tree the observer cannot take whole (too deep,
        too many folders) is watched folder by folder one level down; what still fails is left
        to the periodic reconcile and published. False when even the vault cannot be watched."""
        observer = self._observer
        if observer is None:
            return False
        wanted = [(rel, recursive, True) for rel, recursive in watch_roots(self.root, sink.rules)]
        watches: dict[tuple[str, bool], Any] = {}
        unwatched: list[str] = []
        while wanted:
            rel, recursive, may_split = wanted.pop(0)
            key = (rel, recursive)
            if key in self._watches or key in watches:
                watches[key] = self._watches.pop(key, None) or watches[key]
                continue
            try:
                watches[key] = observer.schedule(sink, str(self.root / rel), recursive=recursive)  # type: ignore[attr-defined]
            except (OSError, RecursionError) as exc:
                if not rel and not recursive:
                    return False
                if recursive and may_split:
                    log.warning(
                        "cannot watch %s/ as one tree (%s): watching its folders one by one",
                        rel or ".",
                        exc.__class__.__name__,
                    )
                    wanted.insert(0, (rel, False, False))
                    wanted += [
                        (child, True, False)
                        for child in subfolders(self.root, rel)
                        if not sink.rules.skips_dir(child)
                    ]
                else:
                    unwatched.append(rel)
        for stale in self._watches.values():
            with contextlib.suppress(KeyError, OSError):  # its folder may be gone already
                observer.unschedule(stale)  # type: ignore[attr-defined]
        self._watches = watches
        if unwatched:
            log.warning(
                "not watching %s (too deep or too many folders for the observer): changes "
                "there are found by the periodic reconcile",
                ", ".join(f"{f}/" for f in unwatched),
            )
        if unwatched or self.lock.facts.get("unwatched"):
            self.lock.update(unwatched=unwatched)
        return True

    def _stop_observer(self) -> None:
        observer = self._observer
        if observer is not None:
            observer.stop()  # type: ignore[attr-defined]
            observer.join(timeout=10)  # type: ignore[attr-defined]
            self._observer = None

    # -- the loop --------------------------------------------------------------------------------

    def _reconcile(self, syncer: Syncer, why: str, asked: Sequence[Reconcile] = ()) -> None:
        """Everything walked and synced; the report handed to whoever `asked` for it."""
        started = time.monotonic()
        report = syncer.sync_all()
        if asked and (report.changed or report.removed):
            syncer.store.prune_cache()  # as `index` does
        self._after_batch(report, started, f"reconcile ({why})")
        for request in asked:
            request.answer(report)

    def _interval(self) -> float:
        minutes = self.config.reconcile_minutes if self._observer is not None else 1.0
        return max(minutes * 60.0, 1.0)

    def _loop(self, syncer: Syncer, sink: EventSink) -> None:
        batches = Debouncer(
            self.changes,
            self.config.debounce_ms / 1000.0,
            MAX_BATCH_WAIT,
            urgent=lambda item: isinstance(item, Reconcile),  # a relayed index waits for it
            max_items=self.max_pending,
            overflow=FLOOD,
            collapses=lambda item: isinstance(item, Change),
        )
        next_reconcile = time.monotonic() + self._interval()
        while not self.stop.is_set():
            if self._vault_missing(syncer, sink):
                self.stop.wait(STOP_CHECK)
                continue
            if self._observer_backlog() > self.max_backlog:
                self._drop_backlog(syncer, sink)
            if time.monotonic() >= next_reconcile:  # also under a steady stream of events
                self._check_lock()
                self._guarded(self._reconcile, syncer, "periodic")
                next_reconcile = time.monotonic() + self._interval()
            wait = min(max(next_reconcile - time.monotonic(), 0.0), STOP_CHECK)
            batch = batches.next_batch(wait)
            if not batch:
                continue
            asked = [item for item in batch if isinstance(item, Reconcile)]
            try:
                self._take(syncer, sink, batch, asked)
            finally:
                for request in asked:
                    request.answer(None)  # its reconcile failed: the client runs it itself

    def _take(
        self, syncer: Syncer, sink: EventSink, batch: list[Item], asked: list[Reconcile]
    ) -> None:
        """One batch applied; where a relayed index asked for a full reconcile, that reconcile
        stands for the batch's changes."""
        self._check_lock()
        self.lock.update(last_event=sink.last_event)
        if RELOAD in batch:
            log.info("%s changed: applying its rules", IGNORE_FILE)
            self._apply_rules(syncer, sink, IGNORE_FILE, asked)
            return
        if VAULT_LOST in batch:
            self._watched_vault = None
        if REWATCH in batch:
            self._rewatch(sink)
        if RESCAN in batch or (self._observer is not None and not self._observer.is_alive()):  # type: ignore[attr-defined]
            log.warning("events may have been lost: full reconcile")
            if self._observer is not None and not self._observer.is_alive():  # type: ignore[attr-defined]
                self._stop_observer()
                self._start_observer(sink)
            self._guarded(self._reconcile, syncer, "events lost", asked)
            return
        if FLOOD in batch:
            self._say_flood(f"more than {self.max_pending} paths changed at once")
            self._guarded(self._reconcile, syncer, "flood of events", asked)
            return
        if asked:
            self._guarded(self._reconcile, syncer, "memsync index", asked)
            return
        changes = [c for c in batch if isinstance(c, Change)]
        if not self._guarded(self._apply, syncer, changes):
            self.changes.put(RESCAN)  # the batch's changes are not lost: a reconcile finds them

    def _observer_backlog(self) -> int:
        """inotify reads that watchdog holds and has not turned into events yet. watchdog 7 drains
        the kernel's queue (whose overflow the watcher hears of) into a queue of its own without
        bound, and pairs moves slower than a folder swapped in a loop fills it: ~65 bytes a swap,
        1 GB after 7.6 million. 0 when this watchdog keeps no such queue."""
        reader = getattr(self._observer, "_inotify_fd", None)
        pending = getattr(reader, "_raw_queue", None)
        return int(pending.qsize()) if pending is not None else 0

    def _drop_backlog(self, syncer: Syncer, sink: EventSink) -> None:
        """Too many events wait inside watchdog: watch anew (its queue goes with the old
        observer) and reconcile everything, which the events would only have told sooner."""
        self._say_flood("events come faster than the observer reads them")
        self._check_lock()
        self._stop_observer()
        self._start_observer(sink)
        self._guarded(self._reconcile, syncer, "flood of events")

    def _say_flood(self, what: str) -> None:
        """One line a minute while a flood lasts, not one per reconcile."""
        now = time.monotonic()
        if now - self._flood_logged >= FLOOD_LOG_EVERY:
            log.warning("%s: reconciling the whole vault instead", what)
            self._flood_logged = now

    def _vault_missing(self, syncer: Syncer, sink: EventSink) -> bool:
        """True while no folder is at the vault's path. A vault folder deleted and made again,
        or moved away and another put in its place, is a folder no watch is on: its edits were
        found by the periodic reconcile only. When a folder is back (another inode, or any after
        the vault's was deleted), it is watched anew and reconciled."""
        now = _folder_identity(self.root)
        if now is None:
            self._watched_vault = None  # a folder made again may reuse its inode number
            if not self._vault_gone:
                log.warning(
                    "the vault folder %s is gone: the index stays as it is until it is back",
                    self.root,
                )
                self._vault_gone = True
            return True
        if now == self._watched_vault:
            return False
        log.info("a vault folder is at %s again: watching it", self.root)
        self._vault_gone = False
        self._stop_observer()
        self._start_observer(sink)
        # its .memsyncignore may say otherwise: read once watched, so that no edit of it is missed
        self._apply_rules(syncer, sink, "vault folder back")
        return False

    def _apply_rules(
        self, syncer: Syncer, sink: EventSink, why: str, asked: Sequence[Reconcile] = ()
    ) -> None:
        """Read .memsyncignore again, watch by its rules and reconcile by them."""
        syncer.reload_rules()
        sink.rules = syncer.rules
        self._rewatch(sink)
        self._guarded(self._reconcile, syncer, why, asked)

    def _check_lock(self) -> None:
        """Write only while the writer lock holds: a server's lock ends with its connection, a
        lock file can be deleted, and another writer may then take the vault."""
        why = self.lock.lost()
        if why:
            raise LockError(
                f"lost the writer lock on {self.location} ({why}); stopped so that two writers "
                "never write one vault: start memsync watch again"
            )

    def _guarded(self, work: Callable[..., None], syncer: Syncer, *args: object) -> bool:
        """Bad input or a passing database error never stops the daemon. After a database error
        the index is opened again (a server may have dropped the connection) and the work tried
        once more. False when it failed."""
        for attempt in (1, 2):
            try:
                work(syncer, *args)
                return True
            except MemsyncError as exc:
                if not (isinstance(exc, StoreError) and exc.reopen) or attempt == 2:
                    log.error("%s; will reconcile on the next cycle", exc)
                    return False
                log.warning("%s; opening the index again", exc)  # the database failed
                self._reopen(syncer)
            except Exception as exc:  # noqa: BLE001 - the daemon must survive anything
                # one line: a traceback in the daemon's log helps no user
                log.error(
                    "unexpected error (%s: %s); will reconcile on the next cycle",
                    exc.__class__.__name__,
                    escape_controls(str(exc)),
                )
                return False
        return False

    def _reopen(self, syncer: Syncer) -> None:
        try:
            syncer.reopen(lambda: self.location.open(create=True))
        except MemsyncError as exc:  # the closed store fails the next batch, which tries again
            log.error("cannot open the index again (%s); trying with the next change", exc)

    def _apply(self, syncer: Syncer, changes: list[Change]) -> None:
        started = time.monotonic()
        report = syncer.sync_changes([(c.path, c.is_folder) for c in changes])
        if report is not None:
            self._after_batch(report, started, "batch")

    def _after_batch(self, report: Report, started: float, what: str) -> None:
        elapsed = (time.monotonic() - started) * 1000
        touched = report.added + report.changed + report.moved + report.removed + report.touched
        # the report is the one place a skip or a warning is told: `index` prints it, the daemon
        # logs it here (sync logging them too wrote each line twice)
        for path, reason in report.skipped:  # a file name's control characters as escapes
            log.warning("skipped %s: %s", escape_controls(path), escape_controls(reason))
        for path, warning in report.warnings:
            log.warning("%s: %s", escape_controls(path), escape_controls(warning))
        if touched or what != "batch":
            log.info(
                "%s: %d files (%d new, %d changed, %d moved, %d removed), %d chunks, %.0f ms",
                what,
                touched,
                report.added,
                report.changed,
                report.moved,
                report.removed,
                report.chunks_written,
                elapsed,
            )
        self.lock.update(last_sync=time.time())
        if self._embedding is not None and report.chunks_written:
            self._embedding.wake.set()

    def index_now(self) -> Report | None:
        """`memsync index` answered by this watcher (relayed from this user's shell): a full
        reconcile on the watcher's own thread, which takes in the changes still waiting for
        their quiet time, then the vectors of what is left without one, counted as `index`
        counts them. None when the watcher stops first (the client then runs it itself); the
        provider's error raised as `index` raises it."""
        started = time.monotonic()
        asked = Reconcile()
        self.changes.put(asked)
        while not (asked.done.wait(STOP_CHECK) or self.stop.is_set()):
            continue
        report, embedding = asked.report, self._embedding
        if report is None or self.stop.is_set():
            return None
        if embedding is not None and report.pending:
            caught_up = embedding.caught_up()
            if caught_up is None:
                return None
            if isinstance(caught_up, EmbeddingError):
                raise caught_up
            report.embedded, report.pending = report.pending - caught_up.pending, caught_up.pending
        report.seconds = time.monotonic() - started
        return report

    def wait_ready(self) -> bool:
        """Blocks until the first reconcile is done: True, unless the watcher is stopping by then."""
        return self.ready.wait() and not self.stop.is_set()

    def request_stop(self) -> None:
        """Safe from a signal handler: it only sets an event (taking the queue's lock there could
        deadlock against the very get() the signal interrupted); the loop sees it within
        STOP_CHECK, the batch in progress finishes first."""
        self.stop.set()
