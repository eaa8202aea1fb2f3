"""Indexes built by a released memsync, not only empty ones: the code of BUILT_BY indexes a vault
in a real process, and this code reads it as it is (a reader), opens it as its writer (only the
steps after the released schema run, once: an index never takes a step twice), and migrates one
set back to an older schema into the very tables the released code's numbered migrations and
this release's later steps made, answering every query alike."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from memsync.store.sql_schema import Migration, SchemaSteps
from tests.conftest import EmbeddingServer, set_back, write

# the commit the named schema steps replaced numbered migrations at: its indexes must open
BUILT_BY = "462584a1dc0ab7e9bdd377691603dc0f09d3bf2f"
REPO = Path(__file__).resolve().parents[2]
QUERIES = ("redis port", "kafka brokers", "runbook")
# the newest schema of BUILT_BY's indexes: this release's writer takes the steps after it
RELEASED_SCHEMA = {"sqlite": 7, "postgres": 5}


def _after_release(steps: Sequence[Migration], backend: str) -> list[str]:
    """The names of this release's steps that BUILT_BY's indexes have not taken."""
    return [step.name for step in steps if step.schema > RELEASED_SCHEMA[backend]]


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BUILT_BY's memsync package, from this repository's history."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{BUILT_BY}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0:
        pytest.skip(f"this checkout does not hold commit {BUILT_BY[:7]}")
    folder = tmp_path_factory.mktemp("released")
    archive = folder / "memsync.tar"
    subprocess.run(
        ["git", "-C", str(REPO), "archive", "-o", str(archive), BUILT_BY, "memsync"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    imported = _process(folder, ["-c", "import memsync; print(memsync.__file__)"], {})
    assert imported.startswith(str(folder))  # not this checkout's
    return folder


@pytest.fixture
def env(embedding_server: EmbeddingServer) -> dict[str, str]:
    return {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}


def _vault(root: Path) -> Path:
    write(root, "redis.md", "# Redis\n\nThe redis service listens on port 6380.\n")
    write(root, "kafka.md", "---\ntags: [ops]\ndate: 2024-05-01\n---\n# Kafka\n\nkafka brokers\n")
    write(root, "notes/runbook.md", "# Runbook\n\n" + "".join(f"- step {i}\n" for i in range(40)))
    return root


# the commands of one check, run in one process (a process each took most of the test's time)
COMMANDS = """
import json, sys
from click.testing import CliRunner
try:
    from memsync.cli.commands import main
except ImportError:  # a release before the faces had rooms
    from memsync.cli import main
outputs = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, (args, result.output)
    outputs.append(result.stdout)
print(json.dumps(outputs))
"""


def _process(code: Path | None, argv: list[str], env: dict[str, str]) -> str:
    """`python ARGV` with the released code (`code`) or this one (None) first on its path (run
    elsewhere than the repository: the working folder comes before PYTHONPATH); its output."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    keep |= {"MEMSYNC_HOST": "laptop", "MEMSYNC_HOME": os.environ.get("MEMSYNC_HOME", "")}
    where = {"PYTHONPATH": str(code or REPO)}
    done = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=keep | env | where,
        cwd=(code or REPO).parent,
        timeout=300,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


# a writer opening an index: it migrates it, and does nothing else
# run by the released code, whose modules were not yet grouped into rooms
SQLITE_WRITER = (
    "import sys; from memsync.sqlite_store import SqliteStore; SqliteStore(sys.argv[1]).close()"
)
POSTGRES_WRITER = (
    "import sys; from memsync.pg_store import PgStore; "
    "PgStore(sys.argv[1], sys.argv[2], create=True).close()"
)


def _run(code: Path | None, *args: str, env: dict[str, str]) -> str:
    """`memsync ARGS` by the released code (`code`) or by this one (None); its output."""
    return _process(code, ["-m", "memsync", *args], env)


def _answers(
    code: Path | None, where: list[str], env: dict[str, str], get: bool = True
) -> list[object]:
    """Each query's results, and what `get` reads of a note, by the released code (`code`) or
    by this one (None); no notice (an older memsync's rules or a newer one's make others)."""
    commands = [
        ["query", query, *where, "--json", "-n", "5", *extra]
        for query in QUERIES
        for extra in ([], ["--tag", "ops"], ["--path", "notes/*"])
    ]
    commands += [["get", "kafka.md", *where, "--raw"]] if get else []
    outputs = json.loads(_process(code, ["-c", COMMANDS, json.dumps(commands)], env))
    queries = len(commands) - get
    return [json.loads(out)["results"] for out in outputs[:queries]] + outputs[queries:]


@contextmanager
def _vault_away(vault: Path) -> Iterator[None]:
    """The vault folder gone for a while: a query answers from the index as it is (with the
    folder there, it would first refresh the index, migrating it under the writer lock)."""
    away = vault.with_name(vault.name + "-away")
    vault.rename(away)
    try:
        yield
    finally:
        away.rename(vault)


@pytest.fixture
def steps_taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the schema steps this process applies."""
    taken: list[str] = []
    migrate = SchemaSteps._migrate

    def recorded(store: SchemaSteps, step: Migration) -> None:
        taken.append(step.name)
        migrate(store, step)

    monkeypatch.setattr(SchemaSteps, "_migrate", recorded)
    yield taken


def test_the_schema_steps_keep_the_released_numbers_one_after_another() -> None:
    from memsync.store.pg_connect import SHARED_MIGRATIONS
    from memsync.store.pg_schema import VAULT_MIGRATIONS
    from memsync.store.sqlite_store import MIGRATIONS

    for steps, newest in ((MIGRATIONS, 11), (VAULT_MIGRATIONS, 8), (SHARED_MIGRATIONS, 1)):
        assert [step.schema for step in steps] == list(range(1, newest + 1))
        assert len({step.name for step in steps}) == newest


def _forget_rules(db: Path) -> None:
    import apsw

    conn = apsw.Connection(str(db))
    conn.execute("UPDATE meta SET value = 'older rules' WHERE key = 'chunker'")
    conn.close()


def _sqlite_schema(db: Path) -> list[tuple[str, str, str]]:
    import apsw

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return [(str(t), str(n), str(s)) for t, n, s in rows]
    finally:
        conn.close()


@pytest.mark.parametrize("version", [1, 4, 6])
def test_a_released_sqlite_index_set_back_migrates_as_the_released_code_did_and_only_once(
    tmp_path: Path, released: Path, env: dict[str, str], steps_taken: list[str], version: int
) -> None:
    """Set back to `version`, read alike by both as it is; migrated by the released code in one
    copy and by this code's steps in another, into the same answers, and (once this code takes
    the steps after the released ones on the first copy) into the same tables (SQLite keeps each
    statement's text); opened again, neither takes a step."""
    from memsync.store.sqlite_store import MIGRATIONS, SqliteStore

    vault = _vault(tmp_path / "vault")
    theirs, ours = tmp_path / "theirs" / "i.sqlite", tmp_path / "ours" / "i.sqlite"
    _run(released, "index", str(vault), "--db", str(theirs), "--provider", "openai", env=env)
    set_back(theirs, version)
    ours.parent.mkdir()
    shutil.copy(theirs, ours)
    with _vault_away(vault):  # without the indexed text before schema 4: no `get`
        as_it_is = _answers(released, ["--db", str(theirs)], env, get=False)
        assert _answers(None, ["--db", str(ours)], env, get=False) == as_it_is
    with SqliteStore(ours, create=True) as writer:
        assert writer.schema == MIGRATIONS[-1].schema
    assert steps_taken == [step.name for step in MIGRATIONS if step.schema > version]
    steps_taken.clear()
    _process(released, ["-c", SQLITE_WRITER, str(theirs)], env)
    for db in (theirs, ours):  # this release's rules (links) read every note again: both do
        _forget_rules(db)
    for db, code in ((theirs, released), (ours, None)):
        _run(code, "index", str(vault), "--db", str(db), "--provider", "openai", env=env)
    migrated = _answers(released, ["--db", str(theirs)], env)
    assert _answers(None, ["--db", str(ours)], env) == migrated
    with SqliteStore(theirs, create=True) as writer:  # the released code's record reads as ours
        assert writer.meta()["schema_version"] == str(MIGRATIONS[-1].schema)
    assert steps_taken == _after_release(MIGRATIONS, "sqlite")
    steps_taken.clear()
    assert _sqlite_schema(ours) == _sqlite_schema(theirs)
    for db in (ours, theirs):
        with SqliteStore(db, create=True):
            pass
    assert steps_taken == []


def _pg_schema(url: str, name: str) -> list[tuple[object, ...]]:
    """A vault's columns, indexes and recorded schema number."""
    import psycopg

    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY 1, 2",
            (name,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, replace(indexdef, %s, '') FROM pg_indexes WHERE schemaname = %s "
            "ORDER BY 1",
            (f"{name}.", name),
        ).fetchall()
        version = conn.execute(
            psycopg.sql.SQL("SELECT value FROM {} WHERE key = 'schema_version'").format(
                psycopg.sql.Identifier(name, "meta")
            )
        ).fetchall()
    return [*columns, *indexes, *version]


def _named_apart(url: str, name: str) -> list[tuple[str, ...]]:
    """_pg_schema with the vault's name taken out: two vaults compared."""
    return [tuple(str(v).replace(name, "V") for v in row) for row in _pg_schema(url, name)]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_released_index_is_read_as_it_is_and_its_writer_takes_the_later_steps_once(
    tmp_path: Path,
    released: Path,
    env: dict[str, str],
    steps_taken: list[str],
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    from memsync.store import pg_schema, sqlite_store
    from memsync.store.locate import Location, PostgresLocation, SqliteLocation

    vault = _vault(tmp_path / "vault")
    location: Location
    if backend == "sqlite":
        db = tmp_path / "index" / "i.sqlite"
        where, location, newest = ["--db", str(db)], SqliteLocation(db), sqlite_store.SCHEMA_VERSION
        steps: Sequence[Migration] = sqlite_store.MIGRATIONS

        def schema() -> object:
            return _sqlite_schema(db)
    else:
        url, name = request.getfixturevalue("pg_vault")
        where, newest = ["--db", url, "--name", name], pg_schema.SCHEMA_VERSION
        location, steps = PostgresLocation(url, name), pg_schema.VAULT_MIGRATIONS

        def schema() -> object:
            return _pg_schema(url, name)

    _run(released, "index", str(vault), *where, "--provider", "openai", env=env)
    before, tables = _answers(released, where, env), schema()
    assert before[0] and before[-1].startswith("---\ntags: [ops]")  # found, and read
    with _vault_away(vault):  # a reader of this release answers from it as it is, writing nothing
        assert _answers(None, where, env, get=False) == before[:-1] and schema() == tables
    with location.open(create=True) as store:  # its writer takes this release's later steps
        assert store.meta()["schema_version"] == str(newest)
    assert steps_taken == _after_release(steps, backend)
    steps_taken.clear()
    with location.open(create=True):  # once
        pass
    assert steps_taken == []
    tables = schema()
    _run(None, "index", str(vault), *where, "--provider", "openai", env=env)
    assert _answers(None, where, env) == before and schema() == tables


def test_a_released_postgres_vault_set_back_migrates_as_the_released_code_did_and_only_once(
    tmp_path: Path,
    released: Path,
    env: dict[str, str],
    steps_taken: list[str],
    pg_vault: tuple[str, str],
) -> None:
    """Vault schema 4 (before window lines) and 2 (one vector a chunk): each migrated by the
    released code in one vault and by this code's steps in another, into the same columns and
    indexes (the vault's name aside) and the same answers; opened again, neither takes a step."""
    import psycopg

    from memsync.store.locate import PostgresLocation
    from memsync.store.pg_schema import VAULT_MIGRATIONS
    from tests.conftest import drop_vault

    url, name = pg_vault
    vault = _vault(tmp_path / "vault")
    undo = {
        4: "ALTER TABLE {v}.chunks DROP COLUMN windows",
        2: "ALTER TABLE {v}.chunks DROP COLUMN windows, DROP COLUMN overlap, DROP COLUMN "
        "centroid, ALTER COLUMN embedding TYPE vector USING NULL",
    }
    for version, statements in undo.items():
        vaults = {"theirs": f"{name}_{version}_theirs", "ours": f"{name}_{version}_ours"}
        try:
            for each in vaults.values():
                where = ["--db", url, "--name", each]
                _run(released, "index", str(vault), *where, "--provider", "openai", env=env)
                with psycopg.connect(url, autocommit=True) as admin:
                    admin.execute(statements.format(v=each))
                    admin.execute(
                        f"UPDATE {each}.meta SET value = %s WHERE key = 'schema_version'",
                        (str(version),),
                    )
            with PostgresLocation(url, vaults["ours"]).open(create=True):
                pass
            assert steps_taken == [s.name for s in VAULT_MIGRATIONS if s.schema > version]
            steps_taken.clear()
            _process(released, ["-c", POSTGRES_WRITER, url, vaults["theirs"]], env)
            answers = []
            for code, each in ((released, vaults["theirs"]), (None, vaults["ours"])):
                where = ["--db", url, "--name", each]
                _run(code, "index", str(vault), *where, "--provider", "openai", env=env)
                answers.append(_answers(code, where, env))
            assert answers[0] == answers[1]
            # the released code's record reads as ours: this release's later steps, and then
            # the same columns and indexes
            with PostgresLocation(url, vaults["theirs"]).open(create=True):
                pass
            assert steps_taken == _after_release(VAULT_MIGRATIONS, "postgres")
            steps_taken.clear()
            schemas = [_named_apart(url, each) for each in vaults.values()]
            assert schemas[0] == schemas[1]
            for each in vaults.values():
                with PostgresLocation(url, each).open(create=True):
                    pass
            assert steps_taken == []
        finally:
            for each in vaults.values():
                drop_vault(url, each)
