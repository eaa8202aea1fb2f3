"""One writer per index: an advisory lock file beside the database.

The kernel drops a flock when its process dies, so a lock left by a killed watcher is stale by
construction and the next writer simply takes it; the pid inside is only for messages and status.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path
from typing import IO

from .errors import LockError


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


QUERY_REFRESH = "query-refresh"  # the role of a query that brings the text up to date
REFRESH_WAIT = 120.0  # seconds a writer waits for a query's refresh (text only: seconds at most)


def _holder_of(handle: IO[str]) -> dict[str, object]:
    handle.seek(0)
    try:
        return dict(json.loads(handle.read() or "{}"))
    except ValueError:
        return {}


def read_holder(db: Path) -> dict[str, object] | None:
    """Who holds the writer lock now (pid, role, started), or None if nobody does."""
    try:
        handle = open(lock_path(db))  # read-only: status works where the index is not ours
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_of(handle)
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


class WriterLock:
    def __init__(self, db: Path, role: str) -> None:
        self.path = lock_path(db)
        self.role = role
        self._handle = None
        self._guard = threading.Lock()  # the watcher's threads both publish facts

    def acquire(self) -> WriterLock:
        """Take the lock, or raise LockError naming the holder. A writer waits for a query's
        refresh (it ends in moments) rather than fail because someone ran a query."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        deadline = None
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder_of(handle)
                role = holder.get("role")
                # a holder that has not written its name yet is given a moment to do so
                patience = REFRESH_WAIT if role == QUERY_REFRESH else 1.0 if not role else 0.0
                if self.role == QUERY_REFRESH:
                    patience = 0.0  # a refresh never waits: a writer is keeping the index fresh
                deadline = deadline or time.monotonic() + patience
                if time.monotonic() >= deadline:
                    handle.close()
                    raise LockError(
                        f"index {self.path.with_suffix('')} is being written by memsync "
                        f"{role or 'writer'} (pid {holder.get('pid')}); stop it first or query "
                        "while it runs",
                        pid=holder.get("pid"),  # type: ignore[arg-type]
                    ) from None
                time.sleep(0.02)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "role": self.role, "started": time.time()}))
        handle.flush()
        self._handle = handle
        return self

    def update(self, **fields: object) -> None:
        """Publish watcher facts (last event, last sync) for `status`, under the lock."""
        with self._guard:
            self._publish(fields)

    def _publish(self, fields: dict[str, object]) -> None:
        if self._handle is None:
            return
        self._handle.seek(0)
        try:
            current = json.loads(self._handle.read() or "{}")
        except ValueError:
            current = {}
        current.update(fields)
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.write(json.dumps(current))
        self._handle.flush()

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
