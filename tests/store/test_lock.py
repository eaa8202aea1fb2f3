"""lock: one writer per index, its facts readable by others; and the Windows form of the file lock,
run here with a stand-in for msvcrt (the module must import where fcntl does not exist)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

import memsync
from memsync.errors import LockError
from memsync.store.lock import FileLock, read_holder


def test_a_second_writer_is_refused_naming_the_first_and_gets_the_lock_once_it_is_free(
    tmp_path: Path,
) -> None:
    db = tmp_path / "index.sqlite"
    first = FileLock(db, "watch").acquire()
    assert read_holder(db) is not None and read_holder(db)["role"] == "watch"  # type: ignore[index]
    with pytest.raises(LockError, match=r"being written by memsync watch \(pid \d+ on "):
        FileLock(db, "index").acquire()
    first.update(last_sync=1.0)
    assert read_holder(db)["last_sync"] == 1.0  # type: ignore[index]
    first.release()
    assert read_holder(db) is None
    with FileLock(db, "index") as second:
        assert second.held


def _windows_lock_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """memsync/store/lock.py imported as on Windows: no fcntl, and an msvcrt whose byte-range locks
    belong to one open file each (as Windows handles do)."""
    held: dict[tuple[int, int], int] = {}

    def locking(fd: int, mode: int, size: int) -> None:
        key = (os.fstat(fd).st_ino, os.lseek(fd, 0, os.SEEK_CUR))
        if mode == fake.LK_UNLCK:
            held.pop(key, None)
        elif held.setdefault(key, fd) != fd:
            raise PermissionError(13, "locked")

    fake = types.SimpleNamespace(LK_NBLCK=2, LK_UNLCK=0, locking=locking)
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    monkeypatch.setitem(sys.modules, "fcntl", None)  # importing it fails, as on Windows
    path = Path(memsync.__file__).parent / "store" / "lock.py"
    spec = importlib.util.spec_from_file_location("memsync.store.lock_on_windows", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lock_imports_and_works_without_fcntl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows = _windows_lock_module(monkeypatch)
    db = tmp_path / "index.sqlite"
    first = windows.FileLock(db, "watch").acquire()
    assert windows.read_holder(db)["role"] == "watch"
    with pytest.raises(LockError, match="being written by memsync watch"):
        windows.FileLock(db, "index").acquire()
    first.release()
    assert windows.read_holder(db) is None
    with windows.FileLock(db, "index") as second:
        assert second.held
