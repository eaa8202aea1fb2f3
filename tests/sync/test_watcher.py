"""A real watchdog observer on temporary folders; nothing about the filesystem is mocked."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config import load_config
from memsync.embed.remote import OpenAIEmbedder
from memsync.errors import EmbeddingError, LockError
from memsync.search.options import Options
from memsync.search.pipeline import search
from memsync.store.locate import SqliteLocation
from memsync.store.sqlite_store import SqliteStore
from memsync.sync.watcher import Watcher
from tests.conftest import EmbeddingServer, wait_until, write


class Running:
    def __init__(
        self,
        root: Path,
        db: Path,
        embedder: object = None,
        limits: dict[str, int] | None = None,
        **config: object,
    ) -> None:
        self.db = db
        self.location = SqliteLocation(db)
        self.watcher = Watcher(
            root,
            self.location,
            load_config(**{"debounce_ms": 100, **config}),
            embedder,  # type: ignore[arg-type]
            retry_base=0.2,
            **(limits or {}),
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        assert self.watcher.ready.wait(15), self.error

    def _run(self) -> None:
        try:
            self.watcher.run()
        except BaseException as exc:  # noqa: BLE001
            self.error = exc
            self.watcher.ready.set()

    def files(self) -> dict[str, str]:
        with SqliteStore(self.db) as store:
            return {p: r.hash for p, r in store.file_rows().items()}

    def keyword(self, text: str) -> list[str]:
        with SqliteStore(self.db) as store:
            outcome = search(store, text, Options(mode="keyword", min_score=0.0), None)
        return [hit.path for hit in outcome.results]

    def stop(self) -> None:
        self.watcher.request_stop()
        self.thread.join(15)
        assert not self.thread.is_alive()


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    write(tmp_path / "vault", "start.md", "# Start\n\nalpha bravo\n")
    return tmp_path / "vault"


@pytest.fixture
def running(vault: Path, tmp_path: Path) -> Iterator[Running]:
    r = Running(vault, tmp_path / "i.sqlite")
    yield r
    r.stop()


def test_start_reconciles_then_create_and_modify_are_searchable(
    running: Running, vault: Path
) -> None:
    assert running.keyword("alpha") == ["start.md"]
    write(vault, "new.md", "# New\n\ncharlie kombucha\n")
    wait_until(lambda: running.keyword("kombucha") == ["new.md"])
    with open(vault / "start.md", "a") as handle:
        handle.write("delta zebra\n")
    wait_until(lambda: running.keyword("zebra") == ["start.md"])


def test_atomic_saves_reindex_the_note_and_never_the_temp_file(
    running: Running, vault: Path
) -> None:
    for temp in (".start.md.swp", "start.md.tmp", "start.md~", ".#start.md"):
        (vault / temp).write_text("# temp\n\nsaved by an editor echo\n")
        os.replace(vault / temp, vault / "start.md")
    wait_until(lambda: running.keyword("echo") == ["start.md"])
    assert list(running.files()) == ["start.md"]


def test_rename_folder_rename_and_case_only_rename_keep_paths_right(
    running: Running, vault: Path
) -> None:
    write(vault, "notes/a.md", "# A\n\nfoxtrot\n")
    write(vault, "notes/b.md", "# B\n\ngolf\n")
    wait_until(lambda: {"notes/a.md", "notes/b.md"} <= set(running.files()))
    os.rename(vault / "notes/a.md", vault / "notes/renamed.md")
    wait_until(
        lambda: "notes/renamed.md" in running.files() and "notes/a.md" not in running.files()
    )
    os.rename(vault / "notes", vault / "archive")
    wait_until(lambda: set(running.files()) == {"start.md", "archive/renamed.md", "archive/b.md"})
    os.rename(vault / "start.md", vault / "Start.md")
    wait_until(lambda: set(running.files()) == {"Start.md", "archive/renamed.md", "archive/b.md"})
    assert running.keyword("foxtrot") == ["archive/renamed.md"]


def test_deletes_of_notes_and_folders_leave_the_index(running: Running, vault: Path) -> None:
    write(vault, "tmp/x.md", "# X\n\nhotel\n")
    write(vault, "tmp/deep/y.md", "# Y\n\nindia\n")
    wait_until(lambda: len(running.files()) == 3)
    (vault / "start.md").unlink()
    import shutil

    shutil.rmtree(vault / "tmp")
    wait_until(lambda: running.files() == {})
    assert running.keyword("india") == []


def test_a_new_folder_with_notes_inside(running: Running, vault: Path, tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    write(staging, "one.md", "# One\n\njuliet\n")
    write(staging, "sub/two.md", "# Two\n\nkilo\n")
    os.rename(staging, vault / "moved-in")
    wait_until(lambda: {"moved-in/one.md", "moved-in/sub/two.md"} <= set(running.files()))


def test_a_burst_of_500_new_notes_is_all_indexed(running: Running, vault: Path) -> None:
    for i in range(500):
        write(vault, f"burst/n{i:03}.md", f"# Burst {i}\n\nnote number {i} lima\n")
    wait_until(lambda: len(running.files()) == 501, timeout=60)


def test_binary_and_latin1_files_do_not_stop_the_daemon(running: Running, vault: Path) -> None:
    (vault / "picture.md").write_bytes(b"\x89PNG\x00\x00binary")
    (vault / "latin.md").write_bytes("caf\xe9 mike".encode("latin-1"))
    wait_until(lambda: "latin.md" in running.files())
    write(vault, "after.md", "# After\n\nnovember\n")
    wait_until(lambda: running.keyword("november") == ["after.md"])
    assert "picture.md" not in running.files()
    with SqliteStore(running.db) as store:
        assert dict(store.skipped())["picture.md"].startswith("binary")


def test_the_daemon_logs_each_skipped_file_and_each_warning_once(
    vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="memsync")
    (vault / "at-start.md").write_bytes(b"\x00start")
    r = Running(vault, tmp_path / "i.sqlite")
    try:
        (vault / "picture.md").write_bytes(b"\x89PNG\x00\x00binary")
        (vault / "evil\x1b[2J.md").write_bytes(b"\x00")  # its name would clear the terminal
        (vault / "latin.md").write_bytes("caf\xe9 mike".encode("latin-1"))
        wait_until(lambda: "latin.md" in r.files())
        wait_until(lambda: any("picture.md" in m for m in caplog.messages))
        wait_until(lambda: any("evil" in m for m in caplog.messages))
    finally:
        r.stop()
    lines = caplog.messages
    assert sum("skipped at-start.md: binary" in m for m in lines) == 1, lines
    assert sum("skipped picture.md: binary" in m for m in lines) == 1, lines
    assert sum("skipped evil\\x1b[2J.md: binary" in m for m in lines) == 1, lines
    assert not any("\x1b" in m for m in lines)
    assert sum(m.startswith("latin.md: invalid UTF-8") for m in lines) == 1, lines


def test_keyword_stays_fresh_while_embeddings_fail_and_vectors_complete_after(
    vault: Path, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    embedder = OpenAIEmbedder(f"{embedding_server.url}/v1", "m", batch_size=8, timeout=2.0)
    embedder.max_attempts = 1
    embedding_server.down = True
    r = Running(vault, tmp_path / "i.sqlite", embedder)
    try:
        write(vault, "fresh.md", "# Fresh\n\noscar papa\n")
        wait_until(lambda: r.keyword("oscar") == ["fresh.md"])
        with SqliteStore(r.db) as store:
            assert store.pending_count() >= 1
        embedding_server.down = False
        wait_until(lambda: SqliteStore(r.db).pending_count() == 0, timeout=30)
        with SqliteStore(r.db) as store:
            assert store.model_key().provider == "openai"
            assert store.counts()["embedded"] == store.counts()["chunks"] == 2
    finally:
        r.stop()


def test_an_index_asked_of_the_watcher_takes_in_what_waits_for_quiet_and_waits_for_vectors(
    vault: Path, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    embedder = OpenAIEmbedder(f"{embedding_server.url}/v1", "m", batch_size=8, timeout=2.0)
    embedder.max_attempts = 1
    r = Running(vault, tmp_path / "i.sqlite", embedder, debounce_ms=3000)
    try:
        wait_until(lambda: SqliteStore(r.db).pending_count() == 0)
        write(vault, "new.md", "# New\n\nkilo lima\n")  # its batch waits three seconds of quiet
        report = r.watcher.index_now()
        assert report is not None
        assert (report.added, report.unchanged, report.chunks_written) == (1, 1, 1)
        assert (report.embedded, report.pending) == (1, 0)
        embedding_server.down = True
        write(vault, "newer.md", "# Newer\n\nmike november\n")
        with pytest.raises(EmbeddingError, match="text is indexed .*; 1 chunks still need vectors"):
            r.watcher.index_now()
        assert r.keyword("november") == ["newer.md"]
    finally:
        r.stop()


def test_a_stopping_watcher_declines_an_index(running: Running) -> None:
    running.watcher.request_stop()
    assert running.watcher.index_now() is None
    running.stop()
    assert running.watcher.index_now() is None


def test_a_second_writer_is_refused_naming_the_pid(
    running: Running, vault: Path, tmp_path: Path
) -> None:
    second = Watcher(vault, running.location, load_config(), None)
    with pytest.raises(LockError, match=f"pid {os.getpid()}"):
        second.run()


@pytest.mark.parametrize("removed", ["i.sqlite", "i.sqlite.lock"])
def test_a_watcher_whose_index_is_deleted_stops_before_a_second_writer_can_start(
    vault: Path, tmp_path: Path, removed: str
) -> None:
    r = Running(vault, tmp_path / "i.sqlite")
    (tmp_path / removed).unlink()  # an index removed by hand while its watcher runs
    write(vault, "new.md", "# New\n\nan edit after it\n")
    r.thread.join(15)
    assert not r.thread.is_alive()
    assert isinstance(r.error, LockError)
    assert "was deleted); stopped so that two writers never write one vault" in str(r.error)


class WatchProcess:
    """`memsync watch` in a subprocess; its log read by a thread, so that no wait is unbounded."""

    def __init__(
        self, vault: Path, db: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        import queue

        command = [sys.executable, "-m", "memsync", "watch", str(vault), "--db", str(db), *args]
        self.process = subprocess.Popen(
            command, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
        )
        self.pid = self.process.pid
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._read)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            self.lines.put(line)

    def wait_for(self, needle: str, timeout: float = 30.0) -> None:
        import queue

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if needle in self.lines.get(timeout=max(deadline - time.monotonic(), 0.01)):
                    return
            except queue.Empty:
                break
        raise AssertionError(f"{needle!r} never logged: {''.join(self.log)}")

    def finish(self, signum: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send the signal; the exit code, once the process has ended (killed after timeout)."""
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        finally:
            self.process.kill()
            self.process.wait(10)
            self._reader.join(10)
            self.process.stderr.close()  # type: ignore[union-attr]


def test_why_a_watcher_stopped_reaches_its_log_file(vault: Path, tmp_path: Path) -> None:
    db, log_file = tmp_path / "i.sqlite", tmp_path / "watch.log"
    watcher = WatchProcess(vault, db, "--provider", "none", "--log-file", str(log_file))
    wait_until(lambda: log_file.exists() and "reconcile (start)" in log_file.read_text())
    (tmp_path / "i.sqlite.lock").unlink()  # its lock file removed by hand
    write(vault, "new.md", "# New\n\nan edit after it\n")
    assert watcher.process.wait(30) == 1
    watcher.finish()
    said = "lost the writer lock on"
    assert said in "".join(watcher.log)
    last = log_file.read_text().splitlines()[-1]
    assert " ERROR stopped: " in last and said in last


def test_sigterm_exits_0_and_a_killed_watchers_lock_is_taken_over(
    vault: Path, tmp_path: Path
) -> None:
    db = tmp_path / "i.sqlite"
    first = WatchProcess(vault, db, "--provider", "none")
    first.wait_for("reconcile (start)")
    refused = subprocess.run(
        [sys.executable, "-m", "memsync", "index", str(vault), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and f"pid {first.pid}" in refused.stderr
    assert first.finish(signal.SIGKILL) == -signal.SIGKILL
    second = WatchProcess(vault, db, "--provider", "none")  # the killed watcher's lock is stale
    second.wait_for("reconcile (start)")
    started = time.monotonic()
    assert second.finish() == 0
    assert time.monotonic() - started < 5


def test_status_shows_the_running_watcher_and_its_last_event(running: Running, vault: Path) -> None:
    from memsync.output import status_text
    from memsync.status import gather

    write(vault, "later.md", "# Later\n\nquebec\n")
    wait_until(lambda: "later.md" in running.files())
    facts = gather(running.location)
    assert facts["writer"]["pid"] == os.getpid() and facts["writer"]["role"] == "watch"
    assert facts["writer"]["last_event"] and facts["writer"]["last_sync"]
    text = status_text(facts)
    assert f"memsync watch running (pid {os.getpid()}" in text and "last event" in text


def test_links_follow_a_rename_a_delete_and_a_new_note_under_watch(
    running: Running, vault: Path
) -> None:
    """A renamed note keeps the backlinks that name it (a bare name), not those that name its
    old place; a deleted note's backlinks break; a note created where a link is broken mends it."""

    def opens(path: str) -> list[str | None]:
        with SqliteStore(running.db) as store:
            return [link.resolved for link in store.outgoing_links(path)]

    def backlinks(path: str) -> list[tuple[str, str]]:
        with SqliteStore(running.db) as store:
            return [(link.source, link.written) for link in store.backlinks(path)]

    write(vault, "projects/heron.md", "# Heron\n\nromeo\n")
    write(vault, "log.md", "# Log\n\n[[heron]] [[projects/heron]] [[kafka]]\n")
    heron = "projects/heron.md"
    wait_until(lambda: opens("log.md") == [heron, heron, None])
    (vault / "archive").mkdir()
    os.rename(vault / heron, vault / "archive/heron.md")
    wait_until(lambda: opens("log.md") == ["archive/heron.md", None, None])
    assert backlinks("archive/heron.md") == [("log.md", "[[heron]]")] and backlinks(heron) == []
    (vault / "archive/heron.md").unlink()
    wait_until(lambda: opens("log.md") == [None, None, None])
    write(vault, "ops/kafka.md", "# Kafka\n")
    wait_until(lambda: opens("log.md") == [None, None, "ops/kafka.md"])
    assert backlinks("ops/kafka.md") == [("log.md", "[[kafka]]")]


def _forget_behind_the_watchers_back(db: Path, path: str) -> None:
    """Simulate an event the watcher never saw: the index loses a note that is still on disk."""
    with SqliteStore(db) as store:
        store.remove_file(path)


def test_an_inotify_overflow_triggers_a_full_reconcile(running: Running, vault: Path) -> None:
    import logging

    _forget_behind_the_watchers_back(running.db, "start.md")
    assert "start.md" not in running.files()
    logging.getLogger("watchdog.observers.inotify_c").warning(
        "Inotify queue overflowed; filesystem events were lost"
    )
    wait_until(lambda: "start.md" in running.files())


def test_a_periodic_reconcile_catches_what_events_missed(vault: Path, tmp_path: Path) -> None:
    r = Running(vault, tmp_path / "i.sqlite", reconcile_minutes=0.02)
    try:
        _forget_behind_the_watchers_back(r.db, "start.md")
        wait_until(lambda: "start.md" in r.files(), timeout=10)
    finally:
        r.stop()


def test_the_periodic_reconcile_runs_even_under_a_steady_stream_of_events(
    vault: Path, tmp_path: Path
) -> None:
    r = Running(vault, tmp_path / "i.sqlite", reconcile_minutes=0.02)
    try:
        _forget_behind_the_watchers_back(r.db, "start.md")
        deadline = time.monotonic() + 10
        while "start.md" not in r.files():
            assert time.monotonic() < deadline, "the periodic reconcile never ran"
            write(vault, "busy.md", f"# Busy\n\nedit at {time.monotonic()}\n")  # never quiet
            time.sleep(0.05)  # the steady stream under test: an edit well within the debounce
    finally:
        r.stop()


def test_a_vault_folder_made_again_or_replaced_is_watched_again(
    running: Running, vault: Path
) -> None:
    shutil.rmtree(vault)
    # the notes' deletions applied, or (when they land in one batch with the folder's) the folder
    # seen gone first, which leaves the index as it is until the folder is back
    wait_until(lambda: running.files() == {} or running.watcher._vault_gone)
    write(vault, "back.md", "# Back\n\nkombucha\n")
    wait_until(lambda: running.keyword("kombucha") == ["back.md"])
    write(vault, "later.md", "# Later\n\nzebra\n")  # seen by a watch on the new folder
    wait_until(lambda: running.keyword("zebra") == ["later.md"])
    vault.rename(vault.with_name("moved away"))
    write(vault, "other.md", "# Other\n\nquokka\n")
    write(vault, ".memsyncignore", "private/\n")  # the new folder's own rules apply
    write(vault, "private/secret.md", "# Secret\n\nnot for the index\n")
    wait_until(lambda: set(running.files()) == {"other.md"})
    write(vault, "after.md", "# After\n\nwombat\n")
    write(vault, "private/more.md", "# More\n\nwombat\n")
    wait_until(lambda: running.keyword("wombat") == ["after.md"])
    assert set(running.files()) == {"other.md", "after.md"}
    shutil.rmtree(vault)  # made again at once, as like as not on the same inode number
    write(vault, "again.md", "# Again\n\nnarwhal\n")
    wait_until(lambda: set(running.files()) == {"again.md"})
    write(vault, "last.md", "# Last\n\nocelot\n")
    wait_until(lambda: running.keyword("ocelot") == ["last.md"])


def test_a_non_utf8_name_in_a_batch_loses_nothing_else(running: Running, vault: Path) -> None:
    (vault / os.fsdecode(b"bad\xffname.md")).write_text("# Bad\n\nsierra\n")
    write(vault, "good.md", "# Good\n\ntango\n")  # saved in the same batch
    wait_until(lambda: running.keyword("tango") == ["good.md"])
    with SqliteStore(running.db) as store:
        assert "not valid UTF-8" in dict(store.skipped())["bad\\xffname.md"]


def test_a_symlink_out_of_the_vault_is_never_indexed_by_the_watcher(
    running: Running, vault: Path, tmp_path: Path
) -> None:
    outside = write(tmp_path / "outside", "passwd.md", "root:x:0:0:root:/root:/bin/bash\n")
    os.symlink(outside, vault / "passwd-link.md")
    write(vault, "marker.md", "# Marker\n\nuniform\n")
    wait_until(lambda: running.keyword("uniform") == ["marker.md"])
    os.utime(vault / "passwd-link.md", follow_symlinks=False)  # touch -h
    write(vault, "marker2.md", "# Marker\n\nvictor\n")
    wait_until(lambda: running.keyword("victor") == ["marker2.md"])
    assert running.keyword("root bash") == [] and "passwd-link.md" not in running.files()
    with SqliteStore(running.db) as store:
        assert "outside the vault" in dict(store.skipped())["passwd-link.md"]


def test_editing_memsyncignore_applies_its_rules_without_a_restart(
    running: Running, vault: Path
) -> None:
    write(vault, "drafts/d.md", "# Draft\n\nwhiskey\n")
    wait_until(lambda: "drafts/d.md" in running.files())
    write(vault, ".memsyncignore", "drafts/\n")
    wait_until(lambda: "drafts/d.md" not in running.files())
    write(vault, "drafts/e.md", "# Draft\n\nxray\n")
    write(vault, "kept.md", "# Kept\n\nyankee\n")
    wait_until(lambda: running.keyword("yankee") == ["kept.md"])
    assert "drafts/e.md" not in running.files()
    (vault / ".memsyncignore").unlink()
    wait_until(lambda: {"drafts/d.md", "drafts/e.md"} <= set(running.files()))


def test_the_embedding_worker_survives_a_size_change_and_any_error_and_says_so(
    vault: Path, tmp_path: Path, embedding_server: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from memsync.status import gather
    from memsync.sync import embedding as embedding_module
    from tests.conftest import HashEmbedder

    caplog.set_level(logging.INFO, logger="memsync")
    url = f"{embedding_server.url}/v1"
    r = Running(vault, tmp_path / "i.sqlite", OpenAIEmbedder(url, "m", batch_size=8, timeout=2.0))
    try:
        wait_until(lambda: SqliteStore(r.db).pending_count() == 0)
        embedding_server._model = HashEmbedder(8)  # the same model name now answers 8 dims
        r.watcher._embedding.embedder = OpenAIEmbedder(url, "m", batch_size=8, timeout=2.0)  # type: ignore[union-attr]
        write(vault, "new.md", "# New\n\nzulu\n")
        wait_until(lambda: "now returns 8-dimension" in str(gather(r.location)["writer"]))
        assert r.watcher._embedding.is_alive()  # type: ignore[union-attr]
        assert any("now returns 8-dimension" in m for m in caplog.messages)
        embedding_server._model = HashEmbedder(16)
        wait_until(lambda: SqliteStore(r.db).pending_count() == 0, timeout=20)
        # the worker clears the error once the batch it stored has committed: a moment later
        wait_until(lambda: gather(r.location)["writer"].get("embedding_error") is None)

        real = embedding_module.embed_pending
        calls: list[int] = []

        def broken_once(*args: object, **kwargs: object) -> object:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("a bug nobody foresaw")
            return real(*args, **kwargs)  # type: ignore[arg-type]

        embedding_module.embed_pending = broken_once  # type: ignore[assignment]
        try:
            write(vault, "newer.md", "# Newer\n\nquince\n")
            wait_until(
                lambda: len(calls) >= 2 and SqliteStore(r.db).pending_count() == 0, timeout=20
            )
        finally:
            embedding_module.embed_pending = real
        assert any(
            "embedding failed unexpectedly (RuntimeError: a bug nobody foresaw)" in m
            for m in caplog.messages
        )
        assert [r.getMessage() for r in caplog.records if r.exc_info] == []  # no traceback
        assert r.watcher._embedding.is_alive()  # type: ignore[union-attr]
    finally:
        r.stop()


def test_sigterm_during_an_embedding_backlog_exits_promptly_and_counts_what_waits(
    vault: Path, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    for i in range(20):
        write(vault, f"n{i}.md", f"# Note {i}\n\n" + "words and more words\n" * 50)
    embedding_server.delay = 5.0  # one batch takes far longer than a stop may
    watch = WatchProcess(
        vault,
        tmp_path / "i.sqlite",
        "--provider",
        "openai",
        env={"OPENAI_BASE_URL": f"{embedding_server.url}/v1"},
    )
    watch.wait_for("reconcile (start)")
    wait_until(lambda: len(embedding_server.requests) >= 1)  # a batch is in flight
    started = time.monotonic()
    assert watch.finish() == 0
    elapsed = time.monotonic() - started
    assert elapsed < 4.0, elapsed  # it did not wait for the 5 s batch
    assert "21 chunks still wait for vectors" in "".join(watch.log)  # 20 notes and start.md


def test_index_waits_for_a_query_s_refresh_instead_of_failing(vault: Path, tmp_path: Path) -> None:
    from memsync.store.lock import QUERY_REFRESH, FileLock

    db = tmp_path / "i.sqlite"
    refresh = FileLock(db, QUERY_REFRESH).acquire()
    releaser = threading.Timer(1.0, refresh.release)
    releaser.start()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "memsync",
                "index",
                str(vault),
                "--db",
                str(db),
                "--provider",
                "none",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        releaser.join()
    assert result.returncode == 0, result.stderr


def _deep_chain(base: Path, levels: int) -> None:
    base.mkdir()
    fd = os.open(base, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


def _remove_deep_chain(base: Path) -> None:
    """shutil.rmtree recurses and gives up on a chain this deep: lift it level by level."""
    while (base / "d").exists():
        os.rename(base / "d", base.parent / "lifted")
        for child in os.listdir(base.parent / "lifted"):
            os.rename(base.parent / "lifted" / child, base / f"{child}.next")
        os.rmdir(base.parent / "lifted")
        if (base / "d.next").exists():
            os.rename(base / "d.next", base / "d")
    base.rmdir()


def test_a_tree_too_deep_for_the_observer_is_reported_and_the_rest_is_watched(
    vault: Path, tmp_path: Path
) -> None:
    from memsync.status import gather

    _deep_chain(vault / "deep", 1200)
    try:
        r = Running(vault, tmp_path / "i.sqlite")
        try:
            assert gather(r.location)["writer"]["unwatched"] == ["deep"]
            write(vault, "other/fresh.md", "# Fresh\n\nquokka\n")
            wait_until(lambda: r.keyword("quokka") == ["other/fresh.md"])
        finally:
            r.stop()
    finally:
        _remove_deep_chain(vault / "deep")


def _inotify_watches() -> set[str]:
    """The folders this process holds an inotify watch on (Linux: /proc/self/fdinfo)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as info:
                for line in info:
                    if line.startswith("inotify wd:"):
                        fields = dict(f.split(":", 1) for f in line.split()[1:])
                        inodes.add(int(fields["ino"], 16))
        except OSError:
            continue
    return inodes


def _folders(root: Path, *rels: str) -> set[int]:
    return {(root / rel).stat().st_ino for rel in rels}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="counts Linux inotify watches")
def test_hidden_and_ignored_folders_get_no_watch_and_the_watches_follow_the_folders(
    vault: Path, tmp_path: Path
) -> None:
    for i in range(300):
        (vault / f".git/objects/{i:02x}").mkdir(parents=True, exist_ok=True)
    (vault / "node_modules/pkg/lib").mkdir(parents=True)
    write(vault, "drafts/d.md", "# Draft\n\nwhiskey\n")
    write(vault, ".memsyncignore", "drafts/\n")
    write(vault, "projects/heron/plan.md", "# Plan\n\nheron\n")
    r = Running(vault, tmp_path / "i.sqlite")
    try:
        indexed = {"", "projects", "projects/heron"}
        wait_until(lambda: _inotify_watches() == _folders(vault, *indexed))
        # an ignored folder appears inside a watched tree: its watch goes
        (vault / "projects/node_modules/x/y").mkdir(parents=True)
        wait_until(lambda: _inotify_watches() == _folders(vault, *indexed))
        # a new folder is watched, and what is written in it is indexed
        write(vault, "ideas/new.md", "# New\n\nquokka\n")
        wait_until(lambda: r.keyword("quokka") == ["ideas/new.md"])
        wait_until(lambda: _inotify_watches() == _folders(vault, *indexed, "ideas"))
        write(vault, "ideas/deeper/more.md", "# More\n\nwombat\n")
        wait_until(lambda: r.keyword("wombat") == ["ideas/deeper/more.md"])
        # drafts/ un-ignored: watched and indexed; then ignored again: unwatched
        (vault / ".memsyncignore").write_text("# nothing ignored\n")
        wait_until(lambda: "drafts/d.md" in r.files())
        expected = {*indexed, "ideas", "ideas/deeper", "drafts"}
        wait_until(lambda: _inotify_watches() == _folders(vault, *expected))
        write(vault, "drafts/e.md", "# Draft\n\nxray\n")
        wait_until(lambda: r.keyword("xray") == ["drafts/e.md"])
        (vault / ".memsyncignore").write_text("DRAFTS/\n")  # case-folded
        wait_until(lambda: "drafts/d.md" not in r.files())
        wait_until(lambda: _inotify_watches() == _folders(vault, *(expected - {"drafts"})))
    finally:
        r.stop()
    assert _inotify_watches() == set()


def test_log_lines_stay_short_whatever_a_library_logs(tmp_path: Path) -> None:
    import logging

    from memsync.cli.common import MAX_LOG_LINE, _log_to

    log_file = tmp_path / "watch.log"
    memsync_log = _log_to(log_file, logging.INFO, "watchdog")
    handler = memsync_log.handlers[-1]
    try:
        logging.getLogger("watchdog").warning("events for %s", ", ".join(["x" * 40] * 2000))
        memsync_log.info("a short line")
    finally:
        for name in ("memsync", "watchdog"):
            logging.getLogger(name).removeHandler(handler)
        handler.close()
    lines = log_file.read_text().splitlines()
    assert len(lines) == 2 and "a short line" in lines[1]
    assert len(lines[0]) < MAX_LOG_LINE + 50 and lines[0].endswith("more characters)")


def test_a_watcher_says_how_many_chunks_it_will_embed_and_how_not_to(
    vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index made keyword-only (provider none) and then watched with a model: every chunk
    waits, and the watcher says it embeds them all and how to keep the index keyword-only."""
    import logging

    from memsync.sync.syncer import index_vault
    from tests.conftest import HashEmbedder

    caplog.set_level(logging.INFO, logger="memsync")
    write(vault, "more.md", "# More\n\ncharlie\n")
    with SqliteStore(tmp_path / "i.sqlite") as store:
        index_vault(store, vault, 1 << 20, None)
    r = Running(vault, tmp_path / "i.sqlite", HashEmbedder())
    try:
        wait_until(lambda: SqliteStore(r.db).pending_count() == 0)
    finally:
        r.stop()
    said = [m for m in caplog.messages if "wait for vectors: embedding them" in m]
    assert said == [
        "2 chunks wait for vectors: embedding them with test hash-64 in the background (keyword "
        'search finds them meanwhile; provider = "none" keeps the index keyword-only)'
    ]
    caplog.clear()
    Running(vault, tmp_path / "i.sqlite", HashEmbedder()).stop()  # nothing waits: nothing said
    assert not any("wait for vectors" in m for m in caplog.messages)


def test_an_embedding_worker_that_cannot_open_its_index_answers_a_wait_and_backs_off(
    tmp_path: Path,
) -> None:
    """A relayed index waiting for vectors hears that the pass failed (None) instead of waiting
    for the watcher to stop, and the worker waits out its backoff instead of retrying at once."""
    from memsync.sync.embedding import EmbeddingWorker
    from tests.conftest import HashEmbedder

    (tmp_path / "a-file").write_text("not a folder\n")
    stop = threading.Event()
    worker = EmbeddingWorker(
        SqliteLocation(tmp_path / "a-file" / "i.sqlite"),
        HashEmbedder(),
        stop,
        5.0,
        lambda **_: None,
    )
    worker.start()
    try:
        started = time.monotonic()
        assert worker.caught_up() is None
        assert time.monotonic() - started < 3.0
        time.sleep(0.5)  # the time under test: a worker with no backoff fails hundreds of times
        assert worker.failures <= 2 and worker.is_alive()
    finally:
        stop.set()
        worker.wake.set()
        worker.join(timeout=5)
    worker.failures = 5000
    assert worker._backoff() == 300.0  # no overflow however long it fails


_BATCH_COUNTS = re.compile(r"(\d+) new, (\d+) changed, (\d+) moved, (\d+) removed")


def test_a_note_moved_to_another_folder_is_one_move_and_never_listed_twice(
    vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hidden folder splits the watches: the vault's own, and one per folder. A move between two
    of them reached the watcher as a create, then half a second later a delete: it was logged "1
    new" then "1 removed", and meanwhile the index listed the note under both paths."""
    import logging

    write(vault, ".obsidian/app.json", "{}")
    write(vault, "inbox/idea.md", "# Idea\n\nhotel india\n")
    write(vault, "projects/plan.md", "# Plan\n\njuliet\n")
    caplog.set_level(logging.INFO, logger="memsync")
    running = Running(vault, tmp_path / "i.sqlite")
    both: list[set[str]] = []
    polling = threading.Event()

    def poll() -> None:
        while not polling.is_set():
            paths = set(running.files())
            if {"inbox/idea.md", "projects/idea.md"} <= paths or {
                "projects/idea.md",
                "projects/kept.md",
            } <= paths:
                both.append(paths)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        os.rename(vault / "inbox/idea.md", vault / "projects/idea.md")
        wait_until(lambda: "projects/idea.md" in running.files())
        os.rename(vault / "projects/idea.md", vault / "projects/kept.md")
        wait_until(lambda: "projects/kept.md" in running.files())
        # the late half of the move comes before this note's event: both are in the inbox's watch
        write(vault, "inbox/later.md", "# Later\n\nkilo\n")
        wait_until(lambda: "inbox/later.md" in running.files())
    finally:
        polling.set()
        poller.join()
        running.stop()
    assert both == []
    assert set(running.files()) == {
        "start.md",
        "projects/plan.md",
        "projects/kept.md",
        "inbox/later.md",
    }
    batches = [
        tuple(map(int, m.groups())) for m in map(_BATCH_COUNTS.search, caplog.messages[1:]) if m
    ]
    new, changed, moved, removed = (sum(column) for column in zip(*batches[1:]))
    assert (new, changed, moved, removed) == (1, 0, 2, 0)  # the later note, and the two moves


def test_past_max_pending_paths_a_batch_is_a_full_reconcile_that_ends_as_a_fresh_index(
    vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flood of events kept every path it named until its batch was applied: past the bound
    the batch is the reconcile the watcher already knows how to do."""
    import logging

    from memsync.sync.syncer import index_vault

    caplog.set_level(logging.INFO, logger="memsync")
    running = Running(vault, tmp_path / "i.sqlite", limits={"max_pending": 10})
    try:
        for i in range(60):
            write(vault, f"flood/n{i}.md", f"# Note {i}\n\nflooded {i}\n")
        os.remove(vault / "start.md")
        wait_until(lambda: any("paths changed at once" in m for m in caplog.messages))
        with SqliteLocation(tmp_path / "fresh.sqlite").open(create=True) as fresh:
            index_vault(fresh, vault, 1 << 20, None)
            expected = {p: r.hash for p, r in fresh.file_rows().items()}
        wait_until(lambda: running.files() == expected)
    finally:
        running.stop()
    assert len(expected) == 60
    assert any("reconcile (flood of events)" in m for m in caplog.messages)


def test_an_unexpected_error_in_a_batch_is_one_log_line_and_a_reconcile_finds_its_changes(
    running: Running, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from memsync.sync.syncer import Syncer

    caplog.set_level(logging.INFO, logger="memsync")
    real = Syncer.sync_changes
    calls: list[int] = []

    def broken_once(self: Syncer, changes: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(22, "Invalid argument")
        return real(self, changes)  # type: ignore[arg-type]

    monkeypatch.setattr(Syncer, "sync_changes", broken_once)
    write(vault, "first.md", "# First\n\nlima\n")
    wait_until(lambda: any("unexpected error" in m for m in caplog.messages))
    write(vault, "second.md", "# Second\n\nmike\n")
    wait_until(lambda: {"first.md", "second.md"} <= set(running.files()))  # not 10 minutes later
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert any(
        "unexpected error (OSError: [Errno 22] Invalid argument); will reconcile" in m
        for m in caplog.messages
    )
