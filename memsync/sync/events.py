"""watchdog's events as queue items: the vault paths they name, or a sentinel saying what to redo;
and the one item that is no event, a relayed `memsync index` asking for a full reconcile.

Events are read by their attributes (the watchdog handler protocol): this module needs no watchdog.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..vault import IGNORE_FILE, IgnoreRules

if TYPE_CHECKING:
    from .syncer import Report

RESCAN = "\0rescan"  # a queue item meaning: events were lost, reconcile everything
RELOAD = "\0reload"  # a queue item meaning: .memsyncignore changed, apply its rules
REWATCH = "\0rewatch"  # a queue item meaning: folders appeared or went, plan the watches again
VAULT_LOST = "\0vault lost"  # a queue item meaning: the vault folder itself was deleted
FLOOD = "\0flood"  # a batch item meaning: too many paths changed at once, reconcile everything


@dataclass(frozen=True)
class Change:
    path: str  # relative to the vault
    is_folder: bool


class Reconcile:
    """A queue item meaning: reconcile everything now and hand over the report, which another
    thread (a relayed `memsync index`) waits for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.report: Report | None = None

    def answer(self, report: Report | None) -> None:
        """The first answer counts: the reconcile's report, or None (not done: declined)."""
        if not self.done.is_set():
            self.report = report
            self.done.set()


Item = Change | str | Reconcile  # what the watcher's queue holds


def relative(root: str, path: str | bytes) -> str | None:
    text = os.fsdecode(path)
    if text == root:
        return None
    if not text.startswith(root + os.sep):
        return None
    return text[len(root) + 1 :].replace(os.sep, "/")


class EventSink:
    """watchdog handler: every src/dest path that may hold a note goes on the queue."""

    def __init__(self, root: Path, rules: IgnoreRules, changes: queue.Queue[Item]) -> None:
        self.root = str(root)
        self.rules = rules
        self.changes = changes
        self.last_event = 0.0

    def dispatch(self, event: object) -> None:  # the watchdog handler protocol
        paths = [getattr(event, "src_path", ""), getattr(event, "dest_path", "")]
        is_folder = bool(getattr(event, "is_directory", False))
        kind = getattr(event, "event_type", "")
        if kind in ("opened", "closed_no_write") or (is_folder and kind == "modified"):
            return  # a folder's mtime changes with every entry: its notes' own events say more
        for raw in paths:
            if not raw:
                continue
            if kind == "deleted" and os.fsdecode(raw) == self.root:
                self.changes.put(VAULT_LOST)  # its watches went with it, even if it comes back
                continue
            rel = relative(self.root, raw)
            if rel is None:
                continue
            if rel == IGNORE_FILE:
                self.changes.put(RELOAD)
                continue
            if is_folder and kind in ("created", "deleted", "moved"):
                self.changes.put(REWATCH)  # an ignored folder too: it may need its watch gone
            if self.rules.skips_folder(rel) if is_folder else self.rules.skips_path(rel):
                continue
            self.last_event = time.time()
            self.changes.put(Change(rel, is_folder))


class OverflowAlarm(logging.Handler):
    """watchdog only logs an inotify queue overflow; turn that line into a full reconcile."""

    def __init__(self, changes: queue.Queue[Item]) -> None:
        super().__init__(logging.WARNING)
        self.changes = changes

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.changes.put(RESCAN)
