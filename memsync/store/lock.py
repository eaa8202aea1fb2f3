"""One writer per index: the waiting policy, and its local form, a lock file beside the database.

The kernel drops a flock when its process dies, so a lock left by a killed watcher is stale by
construction and the next writer simply takes it; the facts inside (pid, host, role) are only for
messages and status. The PostgreSQL backend keeps the same policy over an advisory lock, which
the server drops when the holder's session ends.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import IO, Any

from ..config import make_private_folder
from ..errors import LockError, StoreError, os_reason
from .origin import this_host

# the file lock itself, behind one seam: flock on POSIX (per open file, dropped when its process
# dies); on Windows msvcrt's byte-range lock on one byte far past the facts, which stay readable
try:
    import fcntl
except ImportError:  # Windows; exercised on Linux with a stand-in msvcrt
    import msvcrt

    _LOCK_BYTE = 1 << 30

    def _try_lock(handle: IO[str], shared: bool = False) -> bool:
        """Windows has no shared lock: a reader's probe is exclusive for an instant."""
        os.lseek(handle.fileno(), _LOCK_BYTE, os.SEEK_SET)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True

    def _unlock_file(handle: IO[str]) -> None:
        os.lseek(handle.fileno(), _LOCK_BYTE, os.SEEK_SET)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]

else:

    def _try_lock(handle: IO[str], shared: bool = False) -> bool:
        try:
            fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock_file(handle: IO[str]) -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


QUERY_REFRESH = "query-refresh"  # the role of a query that brings the text up to date
WATCHERS = ("watch", "serve")  # the roles of a process that keeps the index in step
EMBEDDING_WRITERS = (*WATCHERS, "index")  # the roles of a writer that embeds as it goes


def embedding_now(role: str | None) -> str | None:
    """Who is giving waiting chunks their vectors now, as status and a query's note say it: the
    command writing the index, where it is one that embeds."""
    return f"a running memsync {role} is embedding them" if role in EMBEDDING_WRITERS else None


REFRESH_WAIT = 120.0  # seconds a writer waits for a query's refresh (text only: seconds at most)


class WriterLock:
    """The policy every backend shares: take the lock at once, or wait for a query's refresh (it
    ends in moments), or fail naming the holder. Subclasses provide the four primitives."""

    def __init__(self, index: str, role: str) -> None:
        self.index = index  # for messages: the index as the user may see it
        self.role = role
        self.advice = "stop it first or query while it runs"  # what a refusal tells the user
        self.held = False
        self.facts: dict[str, Any] = {}  # what this holder publishes for `status`
        self._guard = threading.Lock()  # the watcher's threads both publish facts

    # -- the primitives ---------------------------------------------------------------------

    def _try(self) -> bool:
        raise NotImplementedError

    def _holder(self) -> dict[str, Any]:
        """The facts another process published while it holds the lock."""
        raise NotImplementedError

    def _write(self, facts: dict[str, Any]) -> None:
        raise NotImplementedError

    def _unlock(self) -> None:
        raise NotImplementedError

    def lost(self) -> str | None:
        """Why the lock is no longer ours, or None while it is (a server's lock ends with its
        connection; a lock file can be deleted)."""
        return None if self.held else "it was released"

    # -- the policy -------------------------------------------------------------------------

    def acquire(self) -> WriterLock:
        """Take the lock, or raise LockError naming the holder. A writer waits for a query's
        refresh rather than fail because someone ran a query."""
        deadline = None
        while not self._try():
            holder = self._holder()
            role = holder.get("role")
            # a holder that has not written its name yet is given a moment to do so
            patience = REFRESH_WAIT if role == QUERY_REFRESH else 1.0 if not role else 0.0
            if self.role == QUERY_REFRESH:
                patience = 0.0  # a refresh never waits: a writer is keeping the index fresh
            deadline = deadline or time.monotonic() + patience
            if time.monotonic() >= deadline:
                self._unlock()
                where = f" on {holder['host']}" if holder.get("host") else ""
                raise LockError(
                    f"index {self.index} is being written by memsync {role or 'writer'} "
                    f"(pid {holder.get('pid')}{where}); {self.advice}",
                    pid=holder.get("pid"),
                )
            time.sleep(0.02)
        self.held = True
        self.facts = {
            "pid": os.getpid(),
            "host": this_host(),
            "role": self.role,
            "started": time.time(),
        }
        self._write(self.facts)
        return self

    def update(self, **fields: object) -> None:
        """Publish watcher facts (last event, last sync) for `status`, under the lock."""
        with self._guard:
            if self.held:
                self.facts.update(fields)
                self._write(self.facts)

    def release(self) -> None:
        with self._guard:
            if self.held:
                self.held = False
                self._unlock()

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder_of(handle: IO[str]) -> dict[str, Any]:
    handle.seek(0)
    try:
        return dict(json.loads(handle.read() or "{}"))
    except ValueError:
        return {}


def _settled_holder(handle: IO[str]) -> dict[str, Any]:
    """The holder's facts, read again while the writer is rewriting them (a moment's window in
    which the file is empty or half written)."""
    for _ in range(20):
        holder = _holder_of(handle)
        if holder:
            return holder
        time.sleep(0.01)
    return {}


def read_holder(db: Path) -> dict[str, Any] | None:
    """Who holds the lock file of `db` now (pid, role, started), or None if nobody does."""
    try:
        handle = open(lock_path(db))  # read-only: status works where the index is not ours
    except OSError:
        return None
    with handle:
        if not _try_lock(handle, shared=True):
            return _settled_holder(handle)
        _unlock_file(handle)
        return None


class FileLock(WriterLock):
    """A flock on `<db>.lock`, its holder's facts as JSON inside."""

    def __init__(self, db: Path, role: str) -> None:
        super().__init__(str(db), role)
        self.db = db
        self.path = lock_path(db)
        self._handle: IO[str] | None = None

    def _try(self) -> bool:
        if self._handle is None:
            try:
                make_private_folder(self.path.parent)
                self._handle = open(self.path, "a+")
            except OSError as exc:
                raise self._failed(exc) from exc
        return _try_lock(self._handle)

    def _holder(self) -> dict[str, Any]:
        return _holder_of(self._handle) if self._handle else {}

    def _write(self, facts: dict[str, Any]) -> None:
        assert self._handle is not None
        try:
            self._handle.seek(0)
            self._handle.truncate()
            self._handle.write(json.dumps(facts))  # "a+": a write always goes to the end
            self._handle.flush()
        except OSError as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: OSError) -> StoreError:
        return StoreError(f"cannot write lock file {self.path}: {os_reason(exc)}")

    def lost(self) -> str | None:
        """The lock file or the database deleted (an index removed by hand while its watcher
        runs): a new writer would lock a new file, and two would write one vault."""
        if self._handle is None:
            return super().lost()
        try:
            mine, there = os.fstat(self._handle.fileno()), os.stat(self.path)
            os.stat(self.db)
        except OSError:
            return "its database or lock file was deleted"
        if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
            return "its lock file was replaced"
        return super().lost()

    def _unlock(self) -> None:
        if self._handle is not None:
            _unlock_file(self._handle)
            self._handle.close()
            self._handle = None
