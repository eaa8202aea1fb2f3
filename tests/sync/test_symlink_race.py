"""A collaborator who can write in the vault swaps a note, or a folder on its way, between the
real thing and a symlink to outside while memsync reads, indexes and writes: whatever it answers
is the real note or a refusal, never outside text, and nothing is ever written outside."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memsync.config import load_config
from memsync.errors import ArgumentError
from memsync.notes import checked_path, read_lines, write_note
from memsync.store.locate import Location, SqliteLocation
from memsync.store.sqlite_store import SqliteStore
from memsync.sync.syncer import Syncer, index_vault
from memsync.sync.watcher import Watcher
from memsync.vault import IgnoreRules, SkipFile, read_note
from tests.conftest import wait_until, write

SECONDS = 2.0  # each race: long enough for thousands of swaps against hundreds of calls
SECRET = "OUTSIDE SECRET"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symlinks need privileges on Windows")

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two names in one step (Linux renameat2 RENAME_EXCHANGE): no moment without either."""
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(done == 0)


class Vault:
    """A vault whose `note.md` and folder `sub/` each flip between the real thing and a symlink
    to outside; `outside/` holds the secret note and a folder of the same shape."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "vault"
        self.outside = tmp_path / "outside"
        write(self.root, "note.md", "# Note\n\ninside text\n")
        write(self.root, "sub/deep.md", "# Deep\n\ninside deep\n")
        write(self.outside, "secret.md", f"# Secret\n\n{SECRET}\n")
        write(self.outside, "folder/deep.md", f"# Deep\n\n{SECRET}\n")
        # the other halves of each exchange, in a hidden folder memsync never indexes
        (self.root / ".swap").mkdir()
        (self.root / ".swap/note.md").symlink_to(self.outside / "secret.md")
        (self.root / ".swap/sub").symlink_to(self.outside / "folder")
        self.before = self.outside_files()
        self.swaps = 0

    def outside_files(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.outside)): p.read_bytes()
            for p in sorted(self.outside.rglob("*"))
            if p.is_file()
        }

    def flip(self) -> None:
        for name in ("note.md", "sub"):
            if not _exchange(self.root / name, self.root / ".swap" / name):
                pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")
            self.swaps += 1

    @contextlib.contextmanager
    def swapping(self) -> Iterator[None]:
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                self.flip()
                time.sleep(0)  # yield the GIL: swaps land between the steps of a call

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            if self.swaps % 4:  # back to the real note and folder
                self.flip()


def race(vault: Vault, call: Callable[[], str | None]) -> tuple[int, list[str]]:
    """Run `call` for SECONDS under the swapper; (calls made, answers holding outside text)."""
    calls, leaks = 0, []
    with vault.swapping():
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            answer = call()
            calls += 1
            if answer is not None and SECRET in answer:
                leaks.append(answer)
    print(f"\n{calls} calls against {vault.swaps} swaps, {len(leaks)} outside answers")
    return calls, leaks


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    return Vault(tmp_path)


def test_reads_never_return_outside_text(vault: Vault) -> None:
    paths = itertools.cycle(["note.md", "sub/deep.md"])

    def read() -> str | None:
        try:
            return read_note(vault.root, next(paths), 1 << 20).text
        except SkipFile:
            return None

    calls, leaks = race(vault, read)
    assert calls > 100 and vault.swaps > 100
    assert leaks == []


def test_an_agent_get_is_the_real_note_or_one_line(vault: Vault) -> None:
    """What memory_get does: the path checked, then its lines read."""
    paths = itertools.cycle(["note.md", "sub/deep.md"])
    refusals: set[str] = set()

    def get() -> str | None:
        rel = next(paths)
        try:
            checked = checked_path(vault.root, rel, IgnoreRules(vault.root))
            return read_lines(vault.root, checked, None, None, 1 << 20).text
        except ArgumentError as refused:
            refusals.add(str(refused).split(":")[0])
            assert "\n" not in str(refused)
            return None

    calls, leaks = race(vault, get)
    assert leaks == [] and calls > 100
    assert refusals <= {"note.md", "sub/deep.md"}


def test_writes_land_in_the_vault_or_nowhere(vault: Vault) -> None:
    targets = itertools.cycle(["note.md", "sub/deep.md", "sub/new.md", "sub/made/new.md"])

    def agent_write() -> None:
        try:
            write_note(vault.root, next(targets), "agent text", "append")
        except ArgumentError as refused:
            assert "\n" not in str(refused)

    calls, _ = race(vault, agent_write)
    assert calls > 50
    assert vault.outside_files() == vault.before  # nothing changed, nothing created outside
    assert "agent text" in (vault.root / "sub/deep.md").read_text()


@pytest.mark.parametrize("location", ["sqlite", "postgres"], indirect=True)
def test_index_never_stores_outside_text(vault: Vault, location: Location) -> None:
    with location.open(create=True) as store:

        def index() -> str | None:
            index_vault(store, vault.root, 1 << 20, None)
            texts = (store.indexed_text(row[0]) for row in store.listing())
            return "\n".join(text for text, _ in filter(None, texts))

        calls, leaks = race(vault, index)
    assert leaks == [] and calls > 5


def test_a_batch_naming_the_swapped_folder_never_raises(vault: Vault, tmp_path: Path) -> None:
    """What the watcher does with a folder's event: list the notes below it. realpath failed
    with EINVAL when the folder became a symlink while it was resolved, and the traceback
    reached the watcher's log."""
    with SqliteLocation(tmp_path / "index.sqlite").open(create=True) as store:
        syncer = Syncer(store, vault.root, 1 << 20)

        def batch() -> str | None:
            syncer.sync_changes([("sub", True), ("note.md", False)])
            texts = (store.indexed_text(row[0]) for row in store.listing())
            return "\n".join(text for text, _ in filter(None, texts))

        calls, leaks = race(vault, batch)
    assert leaks == [] and calls > 50


def test_a_watcher_under_the_race_keeps_a_bounded_backlog_and_logs_no_traceback(
    vault: Vault, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each swap is a lone move out and a lone move in, which watchdog pairs slower than they
    come: its queue of unread events grew by ~65 bytes a swap, without end (1 GB in a day of
    swaps). Past the bound the watcher drops that queue and reconciles; the index then ends as
    a fresh index of the vault."""
    caplog.set_level(logging.INFO)
    db = tmp_path / "index.sqlite"
    watcher = Watcher(
        # any read left waiting counts: how many pile up depends on the machine's load, and
        # on a busy CI runner watchdog sometimes kept under 8
        vault.root,
        SqliteLocation(db),
        load_config(debounce_ms=20),
        None,
        max_backlog=0,
    )
    thread = threading.Thread(target=watcher.run)
    thread.start()
    flood = "events come faster than the observer reads them"
    try:
        assert watcher.ready.wait(15)
        with vault.swapping():
            wait_until(lambda: any(flood in r.getMessage() for r in caplog.records), 60.0)
        write(vault.root, "after.md", "# After\n\nthe race is over\n")
        fresh = tmp_path / "fresh.sqlite"
        with SqliteLocation(fresh).open(create=True) as store:
            index_vault(store, vault.root, 1 << 20, None)
        wait_until(lambda: _files(db) == _files(fresh))
    finally:
        watcher.request_stop()
        thread.join(15)
    assert not thread.is_alive()
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert not any("\n" in r.getMessage() or "unexpected" in r.getMessage() for r in caplog.records)
    assert SECRET not in "".join(_texts(db))


def _files(db: Path) -> dict[str, str]:
    with SqliteStore(db) as store:
        return {path: row.hash for path, row in store.file_rows().items()}


def _texts(db: Path) -> list[str]:
    with SqliteStore(db) as store:
        return [found[0] for row in store.listing() if (found := store.indexed_text(row[0]))]
