"""The PostgreSQL store as a team uses it: the real CLI against a real server, several vaults in
one database, one writer per vault across processes, and no password anywhere it is shown."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from memsync.cli.commands import main
from memsync.errors import LockError, MemsyncError, StoreError
from memsync.filters import NoteFilter, note_filter
from memsync.redact import UNREADABLE, redact, scrub
from memsync.store import pg_schema
from memsync.store.locate import PostgresLocation
from memsync.store.protocols import StoreReader
from memsync.sync import syncer
from memsync.sync.syncer import Syncer
from tests.conftest import EmbeddingServer, HashEmbedder, VaultIndexer, drop_vault, write


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


HERE = socket.gethostname()  # the machine the in-process commands below run on


def _vault(root: Path, topic: str) -> Path:
    write(root, f"{topic}.md", f"# {topic.title()}\n\nThe {topic} service listens on port 6380.\n")
    write(root, "shared.md", f"# Shared\n\nrunbook for {topic}\n")
    return root


@pytest.fixture
def two_vaults(tmp_path: Path, pg_url: str, indexed_vault: VaultIndexer) -> tuple[Path, Path]:
    """`ops` and `research` indexed into one database, keyword-only."""
    ops = indexed_vault(_vault(tmp_path / "ops", "redis"), db=pg_url, host=HERE)
    research = indexed_vault(_vault(tmp_path / "research", "heron"), db=pg_url, host=HERE)
    yield ops, research
    for name in ("ops", "research"):
        drop_vault(pg_url, name)


def test_vaults_share_a_database_and_never_see_each_other(
    two_vaults: tuple[Path, Path], pg_url: str
) -> None:
    listed = _invoke("status", "--db", pg_url)
    assert listed.exit_code == 0 and "ops:" in listed.output and "research:" in listed.output
    facts = json.loads(_invoke("status", "--db", pg_url, "--json").output)
    files = {v["name"]: v["files"] for v in facts["vaults"]}  # a shared server may hold more
    assert files["ops"] == 2 and files["research"] == 2
    for name, topic, other in (("ops", "redis", "heron"), ("research", "heron", "redis")):
        found = _invoke("query", "service port", "--db", pg_url, "--name", name, "--json")
        paths = [r["path"] for r in json.loads(found.output)["results"]]
        assert paths[0] == f"{topic}.md" and f"{other}.md" not in paths
        mine = json.loads(
            _invoke("query", "runbook", "--db", pg_url, "--name", name, "--json").output
        )
        assert [r["path"] for r in mine["results"]] == ["shared.md"]
        assert topic in mine["results"][0]["snippet"]
    ambiguous = _invoke("query", "port", "--db", pg_url)
    assert ambiguous.exit_code == 2 and "ops, research" in ambiguous.output
    unknown = _invoke("query", "port", "--db", pg_url, "--name", "nope")
    assert unknown.exit_code == 1 and "no vault 'nope'" in unknown.output
    status = json.loads(_invoke("status", "--db", pg_url, "--name", "ops", "--json").output)
    assert status["complete"] is False and status["text_up_to_date"] is True
    assert status["files_indexed"] == 2 and status["vector_backend"].startswith("pgvector")


def test_the_only_vault_is_found_without_a_name_and_get_reads_its_lines(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> None:
    url, name = pg_vault
    indexed_vault(_vault(tmp_path / "notes", "kafka"), db=url, flags=("--name", name), host=HERE)
    names = json.loads(_invoke("status", "--db", url, "--json").output)["vaults"]
    if len(names) == 1:  # a shared test server may hold other vaults
        found = json.loads(_invoke("query", "kafka port", "--db", url, "--json").output)
        assert found["results"][0]["path"] == "kafka.md"
    lines = _invoke("get", "kafka.md:3", "--db", url, "--name", name, "--raw")
    assert lines.output == "The kafka service listens on port 6380.\n"


def test_a_released_writer_lock_is_free_at_once_for_the_next_writer(
    pg_vault: tuple[str, str],
) -> None:
    """Released by an unlock, not left to the server to drop once the session's backend exits
    (which under load came after the next `status` asked: it named a writer that had stopped)."""
    url, name = pg_vault
    where = PostgresLocation(url, name)
    for _ in range(30):
        with where.writer_lock("watch"):
            pass
        assert where.holder() is None
        with where.writer_lock("index") as again:  # the next writer never waits
            assert again.held


def test_a_second_writer_is_refused_naming_the_holder_s_host_and_pid(
    tmp_path: Path, pg_vault: tuple[str, str]
) -> None:
    url, name = pg_vault
    root = _vault(tmp_path / "notes", "kafka")
    where = PostgresLocation(url, name)
    with where.writer_lock("watch") as held:
        assert where.holder()["role"] == "watch"
        held.update(last_sync=1.0)
        assert where.holder()["last_sync"] == 1.0
        # another process, as another machine would be: exit 1, naming who writes
        second = subprocess.run(
            [sys.executable, "-m", "memsync", "index", str(root), "--db", url, "--name", name,
             "--provider", "none"],
            capture_output=True, text=True, timeout=120, env=os.environ,
        )  # fmt: skip
        assert second.returncode == 1
        assert f"pid {os.getpid()} on {socket.gethostname()}" in second.stderr
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
        with pytest.raises(LockError):
            where.writer_lock("index").acquire()
        with where.open(create=True) as reader:  # readers never wait for the writer
            assert reader.counts()["files"] == 0
    assert where.holder() is None
    assert (
        _invoke("index", str(root), "--db", url, "--name", name, "--provider", "none").exit_code
        == 0
    )


def test_a_killed_writer_leaves_no_lock_behind(tmp_path: Path, pg_vault: tuple[str, str]) -> None:
    url, name = pg_vault
    code = (
        "import os, sys\n"
        "from memsync.store.locate import PostgresLocation\n"
        f"PostgresLocation({url!r}, {name!r}).writer_lock('watch').acquire()\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert killed.stdout == "held\n" and killed.returncode == -9
    with PostgresLocation(url, name).writer_lock("index") as lock:
        assert lock.held


def test_a_crash_mid_file_leaves_the_vault_consistent(
    tmp_path: Path, pg_vault: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies inside a batch's transaction: nothing of its notes lands, the next
    run completes the index, and the token totals bm25 uses still add up."""
    url, name = pg_vault
    root = tmp_path / "v"
    for i in range(4):
        write(root, f"n{i}.md", f"# N{i}\n\nword{i} shared words here\n")
    where = PostgresLocation(url, name)
    with where.open(create=True) as store:
        real_cursor = store.conn.cursor
        finished = {"n": 0}

        class DiesAtTheEndOfTheSecondBatch:
            """A cursor whose connection is lost after the second batch's chunks, files rows
            and tags are written, before its transaction commits."""

            def __init__(self) -> None:
                self.cursor = real_cursor()

            def __enter__(self):  # type: ignore[no-untyped-def]
                return self

            def __exit__(self, *exc: object) -> None:
                self.cursor.close()

            def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
                return getattr(self.cursor, name)

            def executemany(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
                if str(query).startswith("DELETE FROM skipped"):
                    finished["n"] += 1
                    if finished["n"] == 2:
                        raise psycopg.OperationalError("server closed the connection unexpectedly")
                return self.cursor.executemany(query, *args, **kwargs)

        monkeypatch.setattr(syncer, "BATCH_NOTES", 2)
        monkeypatch.setattr(store.conn, "cursor", DiesAtTheEndOfTheSecondBatch)
        with pytest.raises(StoreError, match="server failed") as raised:  # translated at the store
            Syncer(store, root, 1 << 20).sync_all()
        assert isinstance(raised.value.__cause__, psycopg.OperationalError) and raised.value.reopen
    with where.open() as store:
        assert len(store.file_rows()) == 2  # the first batch committed, the second rolled back
        assert store.counts()["chunks"] == 2
        Syncer(store, root, 1 << 20).sync_all()
        assert len(store.file_rows()) == 4
        rows, tokens = store.conn.execute("SELECT rows, tokens FROM fts_totals").fetchone()
        assert (rows, tokens) == store.conn.execute(
            "SELECT count(*), sum(fts_len) FROM chunks"
        ).fetchone()
        counted = store.conn.execute(
            "SELECT lexeme, count(*) FROM chunks, unnest(tsvector_to_array(fts)) AS lexeme "
            "GROUP BY lexeme"
        ).fetchall()
        kept = store.conn.execute("SELECT lexeme, chunks FROM lexemes WHERE chunks > 0")
        assert dict(counted) == dict(kept.fetchall())


def test_a_password_is_never_printed_logged_or_stored(tmp_path: Path, pg_url: str) -> None:
    """pgserver trusts local connections, so any password works; it must appear nowhere."""
    secret = "s3cr3t-Pa55"
    url = pg_url.replace("postgres:@", f"postgres:{secret}@")
    assert secret in url
    root = _vault(tmp_path / "pw", "vault")
    log = tmp_path / "watch.log"
    try:
        outputs = [
            _invoke("index", str(root), "--db", url, "--name", "pw", "--provider", "none").output,
            _invoke("status", "--db", url).output,
            _invoke("status", "--db", url, "--name", "pw", "--json").output,
            _invoke("query", "port", "--db", url, "--name", "nope").output,
            _invoke("query", "port", "--db", url + "&dbname=missing_db", "--name", "pw").output,
        ]
        for output in outputs:
            assert secret not in output
        assert redact(url) in outputs[2]
        with psycopg.connect(pg_url) as conn:
            stored = conn.execute("SELECT string_agg(value, ' ') FROM pw.meta").fetchone()[0]
            holders = conn.execute("SELECT holder::text FROM memsync.writers").fetchall()
        assert secret not in stored and secret not in str(holders)
        assert not log.exists() or secret not in log.read_text()
    finally:
        drop_vault(pg_url, "pw")


def test_redact_drops_the_password_from_every_form_of_url() -> None:
    assert redact("postgresql://alice:pw@db.example:5432/notes") == (
        "postgresql://alice@db.example:5432/notes"
    )
    assert redact("postgresql://alice@/notes?host=/run/postgresql&password=pw&sslmode=require") == (
        "postgresql://alice@/notes?host=/run/postgresql&sslmode=require"
    )
    assert redact("postgres://db/notes") == "postgres://db/notes"
    # no host in the authority: the `//` stays, so the shown URL can be pasted back
    assert redact("postgresql:///postgres?host=/sock&user=u&password=p") == (
        "postgresql:///postgres?host=/sock&user=u"
    )
    assert redact("postgresql:///notes") == "postgresql:///notes"


def test_redact_hides_every_part_that_could_hold_a_password() -> None:
    """A password holding `#`, `/`, `?`, `@` or `[` unencoded: what precedes the last `@` is
    hidden, and the whole URL when a query may hold that `@`; key=value strings lose `password`."""
    assert redact("postgresql://ana:p#a/s?x@db/notes") == "postgresql://***@db/notes"
    assert redact("postgresql://ana:p@q@db:5433/notes?sslmode=require") == (
        "postgresql://***@db:5433/notes?sslmode=require"
    )
    assert redact("postgresql://ana:p[x]@db/notes") == "postgresql://ana@db/notes"
    assert redact("postgresql://db/notes?password=a@b&sslmode=require") == "postgresql://***"
    assert redact("postgresql://db/notes?password=a#b&sslmode=require") == (
        "postgresql://db/notes?sslmode=require"
    )
    assert redact("https://ana:pw@rerank.example/rerank?api_key=k1&v=2") == (
        "https://ana@rerank.example/rerank?v=2"
    )
    assert redact("host=db user=ana password='a b\\' c' dbname=notes") == (
        "host=db user=ana dbname=notes"
    )
    assert redact("host=db password='unterminated dbname=notes") == UNREADABLE
    assert scrub("quoted: 'a b' c' and 'k1'") == "quoted: '***' and '***'"


def test_a_password_libpq_reads_unencoded_is_never_shown(tmp_path: Path, pg_url: str) -> None:
    """`#`, `?` and `[` in a URL's password (libpq takes them as it is written), one holding `/`
    (libpq cuts the URL there), and a key=value string as --db: shown without any part of it."""
    root = _vault(tmp_path / "pw", "vault")
    odd = pg_url.replace("postgres:@", "postgres:Zq#9?w[4@")
    host = pg_url.partition("host=")[2]
    pairs = f"host={host} user=postgres password='Kv 53cret' dbname=postgres"
    try:
        runs = [
            _invoke("index", str(root), "--db", odd, "--name", "pw", "--provider", "none"),
            _invoke("status", "--db", odd),
            _invoke("status", "--db", odd, "--name", "pw"),
            _invoke("query", "port", "--db", odd, "--name", "pw"),
            _invoke("status", "--db", pairs, "--name", "pw", "--json"),
            _invoke("query", "port", "--db", pairs, "--name", "pw"),
        ]
        assert all(run.exit_code == 0 for run in runs), [run.output for run in runs]
        assert f"postgresql://***@/postgres?host={host} (vault pw)" in runs[2].output
        assert json.loads(runs[4].output)["db"] == (
            f"host={host} user=postgres dbname=postgres (vault pw)"
        )
        assert "vault.md" in runs[5].output
        slash = pg_url.replace("postgres:@", "postgres:Zq/9w@")
        failed = [
            _invoke("status", "--db", slash),
            _invoke("status", "--db", "host=/nowhere user=u password=Kv-53cret dbname=x"),
            _invoke("query", "port", "--db", f"host={host} password='Kv 53cret"),
        ]
        assert [run.exit_code for run in failed] == [1, 1, 1]
        assert "cannot connect to postgresql://***@/postgres?host=" in failed[0].output
        for run in runs + failed:
            leaked = [part for part in ("Zq", "9w", "w[4", "53cret") if part in run.output]
            assert not leaked, (leaked, run.output)  # the output says where, should one leak
            assert "Traceback" not in run.output
    finally:
        drop_vault(pg_url, "pw")


def test_a_reader_sends_queries_to_a_remote_provider_only_when_its_settings_name_it(
    tmp_path: Path,
    pg_vault: tuple[str, str],
    embedding_server: EmbeddingServer,
    indexed_vault: VaultIndexer,
) -> None:
    url, name = pg_vault
    root = _vault(tmp_path / "team", "vault")
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "sk-exported"}
    indexed_vault(root, db=url, flags=("--name", name), provider="openai", host=HERE, env=env)
    args = ["--db", url, "--name", name]
    sent = len(embedding_server.requests)
    query = ["query", "service port", *args, "--json"]
    keyword = json.loads(CliRunner().invoke(main, query, env=env).stdout)
    assert len(embedding_server.requests) == sent  # the query text went nowhere
    assert keyword["mode"] == "keyword" and keyword["results"][0]["path"] == "vault.md"
    assert 'set provider = "openai"' in " ".join(keyword["notices"])
    named = CliRunner().invoke(main, query, env={**env, "MEMSYNC_PROVIDER": "openai"})
    assert json.loads(named.stdout)["mode"] == "hybrid"
    assert len(embedding_server.requests) == sent + 1


def test_names_that_are_not_safe_schemas_are_refused(tmp_path: Path, pg_url: str) -> None:
    root = _vault(tmp_path / "n", "x")
    for bad in ("public", "memsync", "pg_catalog", "Has Space", 'x"; drop', "a" * 60):
        for command in (["index", str(root)], ["query", "x"], ["status"]):
            result = _invoke(*command, "--db", pg_url, "--name", bad)
            assert result.exit_code == 2 and "cannot name a vault" in result.output, bad
    assert _invoke("query", "x", "--name", "ops").exit_code == 2  # --name needs a PostgreSQL --db


def test_a_schema_memsync_did_not_make_is_refused_and_left_unchanged(
    tmp_path: Path, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA theirs; CREATE TABLE theirs.data(x int)")
    try:
        result = _invoke("index", str(_vault(tmp_path / "t", "x")), "--db", pg_url, "--name", "theirs",
                         "--provider", "none")  # fmt: skip
        assert result.exit_code == 1 and "not a memsync vault" in result.output
        with psycopg.connect(pg_url) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'theirs'"
            ).fetchall()
        assert tables == [("data",)]
    finally:
        drop_vault(pg_url, "theirs")


def test_an_unreachable_server_is_one_line_exit_1(tmp_path: Path) -> None:
    url = f"postgresql://nobody:pw@/postgres?host={tmp_path}&connect_timeout=2"
    result = _invoke("status", "--db", url, "--name", "x")
    assert result.exit_code == 1 and "cannot connect to" in result.output
    assert "pw" not in result.output.replace("postgresql", "") and "Traceback" not in result.output


def test_without_psycopg_a_postgres_url_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memsync.store import pg_connect

    for missing in ("psycopg", "pgvector.psycopg"):
        with monkeypatch.context() as patched:
            patched.setitem(sys.modules, missing, None)  # as if not installed
            with pytest.raises(
                MemsyncError, match=r"pip install 'psycopg\[binary\]>=3.1' 'pgvector>=0.2'"
            ):
                pg_connect.connect("postgresql://x@/db")


def test_the_embedding_cache_is_shared_by_the_vaults_of_a_database(
    tmp_path: Path, pg_url: str, hash_embedder: object
) -> None:
    from memsync.sync.syncer import index_vault

    first, second = PostgresLocation(pg_url, "cache_a"), PostgresLocation(pg_url, "cache_b")
    try:
        for where, folder in ((first, "a"), (second, "b")):
            root = _vault(tmp_path / folder, "same")  # the same notes in two vaults
            with where.open(create=True) as store:
                calls = len(hash_embedder.calls)  # type: ignore[attr-defined]
                report = index_vault(store, root, 1 << 20, hash_embedder)  # type: ignore[arg-type]
                made = len(hash_embedder.calls) - calls  # type: ignore[attr-defined]
                assert store.pending_count() == 0 and report.pending == 0
                if where is second:
                    assert made == 1  # only the probe that learns the model's size
    finally:
        drop_vault(pg_url, "cache_a")
        drop_vault(pg_url, "cache_b")


def test_watch_keeps_a_postgres_vault_fresh_for_readers_elsewhere(
    tmp_path: Path, pg_vault: tuple[str, str], hash_embedder: object
) -> None:
    import threading
    import time

    from memsync.config import load_config
    from memsync.search.options import Options
    from memsync.search.pipeline import search
    from memsync.sync.watcher import Watcher

    url, name = pg_vault
    root = _vault(tmp_path / "w", "kafka")
    where = PostgresLocation(url, name)
    watcher = Watcher(root, where, load_config(debounce_ms=100), hash_embedder, retry_base=0.2)  # type: ignore[arg-type]
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        assert watcher.ready.wait(30)
        write(root, "new.md", "# New\n\nthe zeppelin runbook\n")
        (root / "kafka.md").unlink()
        with where.open() as reader:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                found = search(reader, "zeppelin", Options(mode="hybrid"), hash_embedder)  # type: ignore[arg-type]
                fresh = found.results and "kafka.md" not in reader.file_rows()
                if fresh and reader.pending_count() == 0:
                    break
                time.sleep(0.1)
            assert [h.path for h in found.results][:1] == ["new.md"]
            assert sorted(reader.file_rows()) == ["new.md", "shared.md"]
            assert reader.pending_count() == 0 and where.holder()["role"] == "watch"
    finally:
        watcher.request_stop()
        thread.join(15)
    assert where.holder() is None


def test_a_watcher_that_loses_its_lock_stops_instead_of_writing_unlocked(
    tmp_path: Path, pg_vault: tuple[str, str]
) -> None:
    """The server ends the lock's session (a restart, a network cut): another writer may take the
    vault now, so the watcher stops with one line rather than write beside it."""
    import threading

    from memsync.config import load_config
    from memsync.sync.watcher import Watcher

    url, name = pg_vault
    root = _vault(tmp_path / "w", "kafka")
    watcher = Watcher(root, PostgresLocation(url, name), load_config(debounce_ms=50), None)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            watcher.run()
        except BaseException as exc:  # noqa: BLE001
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert watcher.ready.wait(30)
        backend = watcher.lock._conn.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        write(root, "new.md", "# New\n")
        thread.join(20)
        assert not thread.is_alive()
        assert isinstance(raised[0], LockError) and "lost the writer lock" in str(raised[0])
        with PostgresLocation(url, name).open() as store:
            assert "new.md" not in store.file_rows()
    finally:
        watcher.request_stop()
        thread.join(15)


def test_a_watcher_whose_connection_is_dropped_opens_the_index_again(
    tmp_path: Path, pg_vault: tuple[str, str]
) -> None:
    """The server ends the watcher's store session but not its lock's: the next change is
    indexed on a fresh connection, without waiting for the periodic reconcile."""
    import threading
    import time

    from memsync.config import load_config
    from memsync.sync.watcher import Watcher

    url, name = pg_vault
    root = _vault(tmp_path / "w", "kafka")
    where = PostgresLocation(url, name)
    watcher = Watcher(root, where, load_config(debounce_ms=50), None)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        assert watcher.ready.wait(30)
        lock = watcher.lock._conn.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                "'memsync' AND pid NOT IN (%s, pg_backend_pid())",
                (lock,),
            ).fetchall()
        assert ended
        write(root, "new.md", "# New\n\nthe zeppelin runbook\n")
        with where.open() as reader:
            deadline = time.monotonic() + 20
            while "new.md" not in reader.file_rows() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "new.md" in reader.file_rows()
        assert thread.is_alive()
    finally:
        watcher.request_stop()
        thread.join(15)


def _role_database(pg_url: str, role: str, extension: bool) -> str:
    """A non-superuser role owning a fresh database (the extension pre-created by the admin, or
    not): a managed server as RDS, Cloud SQL or Neon give it. Its URL."""
    from urllib.parse import urlsplit, urlunsplit

    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{role}"')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.execute(f"CREATE ROLE \"{role}\" LOGIN NOSUPERUSER PASSWORD 'pw-{role}'")
        admin.execute(f'CREATE DATABASE "{role}" OWNER "{role}"')
    parts = urlsplit(pg_url)
    database = urlunsplit(parts._replace(path=f"/{role}"))
    if extension:
        with psycopg.connect(database, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION vector")
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:pw-{role}@{host}", path=f"/{role}"))


def test_a_role_that_is_not_a_superuser_indexes_and_readers_work_in_read_only_sessions(
    tmp_path: Path, pg_url: str
) -> None:
    from tests.conftest import memsync

    url = _role_database(pg_url, "teammate", extension=True)
    root = _vault(tmp_path / "notes", "redis")
    done = memsync("index", str(root), "--db", url, "--name", "team", "--provider", "none")
    assert done.returncode == 0, done.stderr
    sep = "&" if "?" in url else "?"
    read_only = f"{url}{sep}options=-c%20default_transaction_read_only%3Don"
    with psycopg.connect(read_only) as conn:  # the session really is read-only
        assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "on"
    found = memsync("query", "redis port", "--db", read_only, "--name", "team", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "redis.md"
    for command in (
        ["status", "--name", "team"],
        ["status"],
        ["get", "redis.md", "--name", "team"],
    ):
        shown = memsync(*command, "--db", read_only)
        assert shown.returncode == 0, (command, shown.stderr)
    write(root, "new.md", "# New\n\nfresh words\n")  # behind: said, never written by a reader
    behind = memsync(
        "query", "fresh", "--db", read_only, "--name", "team", "--mode", "keyword", "--json"
    )
    assert json.loads(behind.stdout)["notices"][0].startswith("1 note changed on disk")


def _team_database(tmp_path: Path, pg_url: str) -> tuple[str, dict[str, Path]]:
    """A fresh database `readers` holding the vaults `team` (redis), `old` (kafka) and `other`
    (heron), indexed from host desk; `team` set back to vault schema 4 (as the release before
    left it: no windows column), `old` to schema 2 (one `vector` a chunk, no mean vectors).
    The admin's URL to it and the vaults' folders."""
    from urllib.parse import urlsplit, urlunsplit

    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute('DROP DATABASE IF EXISTS "readers"')
        admin.execute('DROP ROLE IF EXISTS "reader"')
        admin.execute('CREATE DATABASE "readers"')
    url = urlunsplit(urlsplit(pg_url)._replace(path="/readers"))
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION vector")
    indexed_vault = VaultIndexer(tmp_path)
    roots = {
        name: indexed_vault(
            _vault(tmp_path / name, topic), db=url, flags=("--name", name), host="desk"
        )
        for name, topic in (("team", "redis"), ("old", "kafka"), ("other", "heron"))
    }
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "DROP TABLE team.held_links, team.held_names, team.links, team.names, "
            "old.held_links, old.held_names, old.links, old.names"
        )
        admin.execute("ALTER TABLE team.chunks DROP COLUMN windows, DROP COLUMN script")
        admin.execute("UPDATE team.meta SET value = '4' WHERE key = 'schema_version'")
        admin.execute(
            "ALTER TABLE old.chunks DROP COLUMN windows, DROP COLUMN overlap, DROP COLUMN script, "
            "DROP COLUMN centroid, ALTER COLUMN embedding TYPE vector USING NULL"
        )
        admin.execute("UPDATE old.meta SET value = '2' WHERE key = 'schema_version'")
    return url, roots


def _schema_of(url: str, name: str) -> tuple[str, list[str]]:
    """A vault's recorded schema version and its chunks' columns."""
    with psycopg.connect(url) as conn:
        version = conn.execute(
            psycopg.sql.SQL("SELECT value FROM {} WHERE key = 'schema_version'").format(
                psycopg.sql.Identifier(name, "meta")
            )
        ).fetchone()[0]
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'chunks' ORDER BY column_name",
            (name,),
        ).fetchall()
    return version, [c for (c,) in columns]


def test_a_reader_of_an_older_vault_answers_from_it_or_names_its_writer_and_never_migrates_it(
    tmp_path: Path, pg_url: str
) -> None:
    """A read-only session (a replica) reads vault schema 4 as it is and says it is behind;
    schema 2 it cannot search: one line naming the writer's host. Nothing is migrated until
    the vault's writer runs this release's index."""
    from tests.conftest import memsync

    url, roots = _team_database(tmp_path, pg_url)
    before = {name: _schema_of(url, name) for name in ("team", "old")}
    read_only = f"{url}{'&' if '?' in url else '?'}options=-c%20default_transaction_read_only%3Don"
    found = memsync("query", "redis port", "--db", read_only, "--name", "team", "--json")
    assert found.returncode == 0, found.stderr
    answer = json.loads(found.stdout)
    assert answer["results"][0]["path"] == "redis.md"
    assert any("behind an older memsync's rules (schema 4" in n for n in answer["notices"])
    status = memsync("status", "--db", read_only, "--name", "team")
    assert status.returncode == 0 and "schema:   " in status.stdout and "host desk" in status.stdout
    lines = memsync("get", "redis.md:3", "--db", read_only, "--name", "team", "--raw")
    assert lines.stdout == "The redis service listens on port 6380.\n"
    refused = memsync("query", "kafka", "--db", read_only, "--name", "old")
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "schema 2" in refused.stderr and "on host desk must run this release's" in refused.stderr
    listed = memsync("status", "--db", read_only)
    assert listed.returncode == 0, listed.stderr
    assert "  team: " in listed.stdout and "  other: " in listed.stdout
    assert "  old: cannot be read: " in listed.stdout
    assert {name: _schema_of(url, name) for name in ("team", "old")} == before
    upgraded = memsync(
        "index", str(roots["team"]), "--db", url, "--name", "team", "--provider", "none",
        host="desk",
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    version, columns = _schema_of(url, "team")
    assert version == str(pg_schema.SCHEMA_VERSION) and "windows" in columns
    fresh = memsync("query", "redis port", "--db", read_only, "--name", "team", "--json")
    assert not any("behind" in n for n in json.loads(fresh.stdout)["notices"])


def test_a_role_is_told_the_grant_it_lacks_and_a_vault_it_may_not_read_is_marked_in_the_list(
    tmp_path: Path, pg_url: str
) -> None:
    """A role granted nothing is told to ask for USAGE on the shared schema; granted SELECT on
    it and on `team` alone, it answers from `team` (older, never migrated) and the database's
    list marks `other` with the grant it lacks."""
    from urllib.parse import urlsplit, urlunsplit

    from tests.conftest import memsync

    url, _ = _team_database(tmp_path, pg_url)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE ROLE reader LOGIN PASSWORD 'pw-reader'")
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    reader = urlunsplit(parts._replace(netloc=f"reader:pw-reader@{host}"))
    nothing = memsync("query", "redis", "--db", reader, "--name", "team")
    assert nothing.returncode == 1 and len(nothing.stderr.strip().splitlines()) == 1
    assert "GRANT USAGE ON SCHEMA memsync" in nothing.stderr, nothing.stderr
    assert "write access" not in nothing.stderr
    with psycopg.connect(url, autocommit=True) as admin:
        for schema in ("memsync", "team", "old"):
            admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO reader")
            admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO reader")
    found = memsync("query", "redis port", "--db", reader, "--name", "team", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "redis.md"
    assert _schema_of(url, "team")[0] == "4"
    listed = memsync("status", "--db", reader, "--json")
    assert listed.returncode == 0, listed.stderr
    vaults = {v["name"]: v for v in json.loads(listed.stdout)["vaults"]}
    assert vaults["team"]["files"] == 2 and "error" not in vaults["team"]
    assert "GRANT USAGE ON SCHEMA other" in vaults["other"]["error"]
    assert "schema 2" in vaults["old"]["error"]
    text = memsync("status", "--db", reader)
    assert "  other: cannot be read: " in text.stdout and "pw-reader" not in text.stdout


def test_without_the_vector_extension_the_error_says_what_an_admin_must_run(
    tmp_path: Path, pg_url: str
) -> None:
    from tests.conftest import memsync

    url = _role_database(pg_url, "newcomer", extension=False)
    refused = memsync("index", str(_vault(tmp_path / "n", "x")), "--db", url, "--provider", "none")
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert 'CREATE EXTENSION vector; in database "newcomer"' in refused.stderr
    assert "pw-newcomer" not in refused.stderr


def test_a_bulk_load_builds_the_hnsw_graph_after_the_rows_and_later_updates_go_into_it(
    tmp_path: Path, pg_vault: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsync.store import pg_vectors
    from memsync.store.pg_vectors import BULK_VECTORS
    from memsync.sync.syncer import index_vault
    from tests.conftest import HashEmbedder

    monkeypatch.setattr(pg_vectors, "GRAPH_MIN_VECTORS", BULK_VECTORS)  # a vault worth a graph
    url, name = pg_vault
    root = tmp_path / "v"
    for i in range(BULK_VECTORS + 200):
        write(root, f"n{i // 100}/n{i}.md", f"# N{i}\n\nword{i} topic{i % 9} shared\n")
    embedder = HashEmbedder()
    with PostgresLocation(url, name).open(create=True) as store:
        graph_while_storing: list[bool] = []
        real = store.store_embeddings

        def watching(*args, **kwargs):  # type: ignore[no-untyped-def]
            graph = store.conn.execute("SELECT to_regclass('chunks_hnsw')").fetchone()[0]
            graph_while_storing.append(graph is not None)
            return real(*args, **kwargs)

        monkeypatch.setattr(store, "store_embeddings", watching)
        report = index_vault(store, root, 1 << 20, embedder)
        assert report.embedded == BULK_VECTORS + 200 and not any(graph_while_storing)
        graph = store.conn.execute("SELECT to_regclass('chunks_hnsw')").fetchone()[0]
        analyzed = store.conn.execute(
            "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'chunks' "
            "AND schemaname = %s",
            (name,),
        ).fetchone()[0]
        assert graph is not None and analyzed is not None
        graph_while_storing.clear()
        # words of this vault's own: a server kept between runs has the others in its cache
        write(root, "late.md", f"# Late\n\nquokka arrives late {name}\n")
        assert index_vault(store, root, 1 << 20, embedder).embedded == 1
        assert graph_while_storing == [True]  # a few vectors go into the built graph
        query = embedder.embed_query(f"quokka arrives late {name}")
        [(best, _)] = store.vector_search(query, 1)
        assert store.chunks([best])[best].path == "late.md"


def _word_notes(root: Path, numbers: range, name: str) -> None:
    """Notes n<i>.md of words their own (w<i>a w<i>b w<i>c) and the vault's name."""
    for i in numbers:
        write(root, f"n{i}.md", f"# N{i}\n\nw{i}a w{i}b w{i}c {name}\n")


def _word_vault(
    tmp_path: Path,
    pg_vault: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    embedder: HashEmbedder,
    notes: int,
    graph_from: int,
) -> tuple[Path, PostgresLocation]:
    """A vault of `notes` word notes indexed, its graph built from `graph_from` vectors."""
    from memsync.store import pg_vectors
    from memsync.sync.syncer import index_vault

    monkeypatch.setattr(pg_vectors, "GRAPH_MIN_VECTORS", graph_from)
    root, where = tmp_path / "v", PostgresLocation(*pg_vault)
    _word_notes(root, range(notes), pg_vault[1])
    with where.open(create=True) as store:
        index_vault(store, root, 1 << 20, embedder)
    return root, where


def _nearest(store: StoreReader, embedder: HashEmbedder, i: int) -> str:
    """The path of the chunk nearest to note i's words."""
    [(best, _)] = store.vector_search(embedder.embed_query(f"w{i}a w{i}b w{i}c"), 1)
    return store.chunks([best])[best].path


def test_a_small_vault_is_scanned_exactly_and_gets_its_graph_once_it_is_large(
    tmp_path: Path,
    pg_vault: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    hash_embedder: HashEmbedder,
) -> None:
    """Below GRAPH_MIN_VECTORS no graph is built (an exact scan is as fast there, and finds
    every neighbour); the sync that brings the vault to it builds the graph, and searches use
    it from then on."""
    from memsync.sync.syncer import index_vault

    root, where = _word_vault(tmp_path, pg_vault, monkeypatch, hash_embedder, 20, graph_from=30)
    with where.open() as store:
        assert store.conn.execute("SELECT to_regclass('chunks_hnsw')").fetchone()[0] is None
        assert "exact scan: no graph below 30 vectors" in store.vector_backend
        assert _nearest(store, hash_embedder, 7) == "n7.md"
        _word_notes(root, range(20, 35), pg_vault[1])
        index_vault(store, root, 1 << 20, hash_embedder)  # a few at a time, as `watch` adds
        assert store.conn.execute("SELECT to_regclass('chunks_hnsw')").fetchone()[0] is not None
        assert "HNSW m 32" in store.vector_backend
        assert _nearest(store, hash_embedder, 33) == "n33.md"


def test_a_reader_searches_the_graph_with_the_ef_search_it_is_configured_with(
    tmp_path: Path,
    pg_vault: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    hash_embedder: HashEmbedder,
) -> None:
    """`ef_search` (config, MEMSYNC_EF_SEARCH) sets the HNSW search list of a reader's session:
    a team trades recall for latency; status says what it is."""
    from memsync.config import load_config
    from memsync.store.locate import for_vault

    root, _ = _word_vault(tmp_path, pg_vault, monkeypatch, hash_embedder, 5, graph_from=1)
    monkeypatch.setenv("MEMSYNC_EF_SEARCH", "200")
    url, name = pg_vault
    with for_vault(root, load_config(db=url, name=name)).open() as store:
        assert _nearest(store, hash_embedder, 3) == "n3.md"
        assert store.conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "200"
        assert "ef_search 200" in store.vector_backend


def test_a_vault_of_one_vector_per_chunk_is_embedded_again_as_windows(
    pg_vault: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hash_embedder: HashEmbedder,
) -> None:
    """Vault schema 3: the one-vector column and its graph go, the mean-vector column takes the
    vault's size with a new graph, and `index` embeds every chunk again."""
    from memsync.store.pg_store import PgStore
    from memsync.sync.syncer import index_vault

    url, name = pg_vault
    root = tmp_path / "vault"
    write(
        root,
        "chat.md",
        "# Chat\n\n" + "".join(f"- **A:** line {i} about x{i} in {name}\n" for i in range(60)),
    )
    key = hash_embedder.key
    monkeypatch.setattr(PgStore, "SCHEMA_VERSION", 2)
    location = PostgresLocation(url, name)  # the vault as memsync made it before
    with location.open(create=True) as store, store.transaction():
        store.conn.execute("ALTER TABLE chunks ALTER COLUMN embedding TYPE vector(64)")
        store.conn.execute(
            "INSERT INTO chunks(path, start_line, end_line, hash, model, text, embedding, "
            "fts, fts_len, updated_at) VALUES('chat.md', 1, 2, 'h', %s, 'old', %s, '', 0, 0)",
            (key.model, "[" + ",".join(["0.125"] * 64) + "]"),
        )
        store.conn.execute(
            "CREATE INDEX chunks_hnsw ON chunks USING hnsw (embedding vector_cosine_ops)"
        )
        store.set_meta(
            provider=key.provider, model=key.model, provider_key=key.provider_key, dims=64
        )
    monkeypatch.undo()
    with PostgresLocation(url, name).open(create=True) as store:  # the writer migrates it
        assert store.pending_count() == store.counts()["chunks"] == 1
        graph = store.conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'chunks_hnsw' AND schemaname = %s",
            (name,),
        ).fetchone()
        assert graph is None  # the old column's graph is gone; one chunk needs none
        report = index_vault(store, root, 1 << 20, hash_embedder)
        assert report.embedded == store.counts()["chunks"] and store.pending_count() == 0
        sizes = store.conn.execute("SELECT length(embedding) / 256 FROM chunks").fetchall()
        assert max(n for (n,) in sizes) > 1  # several windows' vectors in a chunk


def test_commits_do_not_wait_for_the_disk_as_sqlite_s_do_not(pg_vault: tuple[str, str]) -> None:
    """synchronous_commit off, as SQLite's WAL with synchronous=NORMAL: a crash may lose the
    last writes (the next sync makes them again), never half a note."""
    url, name = pg_vault
    with PostgresLocation(url, name).open(create=True) as store:
        assert store.conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"


def test_a_vault_made_without_halfvec_is_converted_once_the_server_has_it(
    tmp_path: Path,
    pg_vault: tuple[str, str],
    hash_embedder: HashEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mean vectors kept as `vector` (a vault made on pgvector < 0.7) become halfvec at the
    writer's next sync where the server has it, without re-embedding, with their graph built
    again; an older server keeps `vector`. The nearest chunk is found before and after."""
    from memsync.sync.syncer import index_vault

    root, where = _word_vault(tmp_path, pg_vault, monkeypatch, hash_embedder, 12, graph_from=1)
    name = pg_vault[1]
    with where.open() as store:
        with store.transaction():  # as memsync left it on a server without halfvec
            store.conn.execute("DROP INDEX chunks_hnsw")
            store.conn.execute(
                "ALTER TABLE chunks ALTER COLUMN centroid TYPE vector(64) "
                "USING centroid::vector(64)"
            )
            store.conn.execute(
                "CREATE INDEX chunks_hnsw ON chunks USING hnsw (centroid vector_cosine_ops)"
            )
        newer = store._pgvector() >= (0, 7)  # type: ignore[attr-defined]
    with where.open() as store:
        _word_notes(root, range(12, 13), name)
        report = index_vault(store, root, 1 << 20, hash_embedder)
        assert report.embedded == 1  # the others keep their vectors
        kind = store.conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'chunks'::regclass AND attname = 'centroid'"
        ).fetchone()[0]
        graph = store.conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'chunks_hnsw' AND schemaname = %s",
            (name,),
        ).fetchone()
        assert kind == ("halfvec(64)" if newer else "vector(64)")
        assert graph is not None and f"{kind.split('(')[0]}_cosine_ops" in graph[0]
        assert _nearest(store, hash_embedder, 5) == "n5.md"
        assert _nearest(store, hash_embedder, 12) == "n12.md"


def test_mean_vectors_are_half_precision_where_pgvector_has_halfvec(
    tmp_path: Path, pg_vault: tuple[str, str], hash_embedder: HashEmbedder
) -> None:
    """pgvector 0.7+: the graph's vectors are halfvec (a third of the graph, the same recall);
    older servers keep vector. Either way the nearest chunk is found, filtered or not."""
    from memsync.sync.syncer import index_vault

    url, name = pg_vault
    root = tmp_path / "v"
    for i in range(30):
        write(root, f"n{i % 3}/n{i}.md", f"# N{i}\n\nword{i} topic{i % 5}\n")
    with PostgresLocation(url, name).open(create=True) as store:
        index_vault(store, root, 1 << 20, hash_embedder)
        version = store.conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()[0]
        kind = store.conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = 'chunks'::regclass AND attname = 'centroid'"
        ).fetchone()[0]
        newer = tuple(int(p) for p in version.split(".")[:2]) >= (0, 7)
        assert kind == ("halfvec" if newer else "vector") and kind in store.vector_backend
        query = hash_embedder.embed_query("# N7\n\nword7 topic2")
        for only in (NoteFilter(), note_filter(paths=["n1/"])):
            [(best, _)] = store.vector_search(query, 1, only)
            assert store.chunks([best])[best].path == "n1/n7.md"
