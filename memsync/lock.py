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

from .errors import LockError


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def read_holder(db: Path) -> dict[str, object] | None:
    """Who holds the writer lock now (pid, role, started), or None if nobody does."""
    path = lock_path(db)
    try:
        handle = open(path, "r+")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return dict(json.loads(handle.read() or "{}"))
            except ValueError:
                return {}
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


class WriterLock:
    def __init__(self, db: Path, role: str) -> None:
        self.path = lock_path(db)
        self.role = role
        self._handle = None
        self._guard = threading.Lock()  # the watcher's threads both publish facts

    def acquire(self) -> WriterLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            try:
                holder = json.loads(handle.read() or "{}")
            except ValueError:
                holder = {}
            handle.close()
            pid = holder.get("pid")
            role = holder.get("role", "memsync")
            raise LockError(
                f"index {self.path.with_suffix('')} is being written by memsync {role} "
                f"(pid {pid}); stop it first or query while it runs",
                pid=pid,
            ) from None
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
