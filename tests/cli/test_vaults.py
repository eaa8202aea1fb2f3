"""`memsync vaults` lists this user's indexes (or a PostgreSQL database's vaults) and `vaults
forget` removes one, never a note: real index files and a real PostgreSQL, the real CLI."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memsync.config import default_db_path
from memsync.store.lock import FileLock
from tests.conftest import VaultIndexer, cli, free_port

NOTES = {
    "redis.md": "# Redis\n\nThe redis service listens on port 6380.\n",
    "kafka.md": "# Kafka\n\nkafka brokers\n",
}


def test_vaults_lists_each_index_with_its_folder_counts_size_sync_and_writer(
    tmp_path: Path,
    indexed_vault: VaultIndexer,
) -> None:
    notes = indexed_vault(tmp_path / "notes", notes=NOTES)
    gone = indexed_vault(tmp_path / "old notes", notes=NOTES)
    shutil.rmtree(gone)
    listed = cli("vaults", "--json")
    assert listed.returncode == 0, listed.stderr
    facts = json.loads(listed.stdout)
    by_vault = {v["vault"]: v for v in facts["vaults"]}
    here = by_vault[str(notes)]
    assert here["name"] == default_db_path(notes).stem and here["vault_exists"] is True
    assert (here["files"], here["chunks"], here["chunks_pending"]) == (2, 2, 2)
    assert here["size_bytes"] >= default_db_path(notes).stat().st_size > 0
    assert here["last_sync_age_s"] is not None and here["writer"] is None
    assert by_vault[str(gone)]["vault_exists"] is False
    with FileLock(default_db_path(notes), "watch"):
        text = cli("vaults").stdout
    assert f"  {here['name']}: {notes}, 2 files, 2 chunks (2 without vectors), " in text
    assert f"{gone} (folder gone)" in text and "watch pid " in text


def test_without_an_index_vaults_says_how_to_make_one() -> None:
    listed = cli("vaults")
    assert listed.returncode == 0 and "no vault indexed yet (memsync index VAULT)" in listed.stdout
    assert json.loads(cli("vaults", "--json").stdout)["vaults"] == []


def test_forget_removes_the_index_files_and_never_a_note(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    notes = indexed_vault(tmp_path / "notes", notes=NOTES)
    other = indexed_vault(tmp_path / "other", notes=NOTES)
    db = default_db_path(notes)
    before = sorted(p.name for p in notes.rglob("*"))
    done = cli("vaults", "forget", str(notes))  # no terminal: it asks nothing
    assert done.returncode == 0, done.stderr
    assert f"forgot the index {db.stem} of {notes}" in done.stdout
    assert not [p for p in db.parent.iterdir() if p.name.startswith(db.stem)]
    assert sorted(p.name for p in notes.rglob("*")) == before
    assert default_db_path(other).exists()
    by_name = cli("vaults", "forget", default_db_path(other).stem, "--yes")
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(cli("vaults", "--json").stdout)["vaults"] == []
    missing = cli("vaults", "forget", str(notes))
    assert missing.returncode == 1 and "memsync vaults lists them" in missing.stderr


def test_forget_is_refused_while_a_writer_holds_the_index(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    notes = indexed_vault(tmp_path / "notes", notes=NOTES)
    with FileLock(default_db_path(notes), "watch"):
        refused = cli("vaults", "forget", str(notes), "--yes")
    assert refused.returncode == 1
    assert "being written by memsync watch" in refused.stderr
    assert "stop it first, then forget the index" in refused.stderr
    assert default_db_path(notes).exists()


def forget_at_a_terminal(target: str, answer: bytes) -> tuple[int, str]:
    """`memsync vaults forget TARGET` with a terminal for its input, answering `answer`."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "memsync", "vaults", "forget", target],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(terminal)
    os.write(controller, answer)
    out, err = process.communicate(timeout=120)
    os.close(controller)
    return process.returncode, (out + err).decode()


def test_at_a_terminal_forget_asks_first_and_no_keeps_the_index(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    notes = indexed_vault(tmp_path / "notes", notes=NOTES)
    code, said = forget_at_a_terminal(str(notes), b"n\n")
    assert code == 1 and "Forget the index " in said and "The notes stay" in said
    assert "kept: nothing was removed" in said and default_db_path(notes).exists()
    code, said = forget_at_a_terminal(str(notes), b"y\n")
    assert code == 0, said
    assert not default_db_path(notes).exists()


def test_status_outside_every_vault_points_to_vaults(
    tmp_path: Path, indexed_vault: VaultIndexer, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexed_vault(tmp_path / "a", notes=NOTES)
    indexed_vault(tmp_path / "b", notes=NOTES)
    monkeypatch.chdir(tmp_path)
    done = cli("status")
    assert done.returncode == 2
    assert "memsync vaults lists them" in done.stderr


def test_vaults_takes_a_postgresql_db_only() -> None:
    refused = cli("vaults", "--db", "some.sqlite")
    assert refused.returncode == 2 and "postgresql://" in refused.stderr


# PostgreSQL: the real server of conftest's pg_url (slow: a server starts once per session)


def test_vaults_lists_a_databases_vaults_and_forget_drops_one_schema(
    tmp_path: Path, indexed_vault: VaultIndexer, pg_vault: tuple[str, str]
) -> None:
    import psycopg

    url, name = pg_vault
    notes = indexed_vault(tmp_path / "notes", notes=NOTES, db=url, flags=["--name", name])
    listed = json.loads(cli("vaults", "--db", url, "--json").stdout)
    [mine] = [v for v in listed["vaults"] if v["name"] == name]
    assert mine["vault"] == str(notes) and mine["files"] == 2 and mine["size_bytes"] > 0
    assert mine["vault_exists"] is True and mine["last_sync_age_s"] is not None
    done = cli("vaults", "forget", name, "--db", url)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(url) as conn:
        schema = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,))
        assert schema.fetchone() is None
        registered = conn.execute("SELECT 1 FROM memsync.vaults WHERE name = %s", (name,))
        assert registered.fetchone() is None
    assert sorted(p.name for p in notes.iterdir()) == ["kafka.md", "redis.md"]
    assert name not in cli("vaults", "--db", url).stdout


def test_forget_in_postgresql_is_refused_to_all_but_the_owner_and_while_a_writer_runs(
    tmp_path: Path, indexed_vault: VaultIndexer, pg_vault: tuple[str, str]
) -> None:
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    from memsync.store.pg_lock import AdvisoryLock

    url, name = pg_vault
    indexed_vault(tmp_path / "notes", notes=NOTES, db=url, flags=["--name", name])
    with AdvisoryLock(url, name, "watch"):
        refused = cli("vaults", "forget", name, "--db", url)
    assert refused.returncode == 1 and "being written by memsync watch" in refused.stderr
    role = f"r_{name}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
        for schema in ("memsync", name):
            admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}")
    parts = urlsplit(url)
    other = urlunsplit(parts._replace(netloc=f"{role}:pw-{role}@{parts.netloc.rpartition('@')[2]}"))
    try:
        stranger = cli("vaults", "forget", name, "--db", other)
        assert stranger.returncode == 1
        assert "belongs to the PostgreSQL user" in stranger.stderr, stranger.stderr
        assert f"pw-{role}" not in stranger.stderr
        assert name in cli("vaults", "--db", url).stdout
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_an_index_that_cannot_be_read_is_listed_with_why_and_can_be_forgotten() -> None:
    folder = default_db_path(Path("broken")).parent
    folder.mkdir(parents=True)
    (folder / "broken-0123456789ab.sqlite").write_bytes(b"not a database" * 100)
    listed = cli("vaults")
    assert listed.returncode == 0, listed.stderr
    assert "  broken-0123456789ab: cannot be read: " in listed.stdout
    done = cli("vaults", "forget", "broken-0123456789ab")
    assert done.returncode == 0, done.stderr
    assert list(folder.iterdir()) == []


def test_vaults_alone_says_a_database_it_cannot_reach_in_one_line() -> None:
    """The group's own callback runs inside the boundary too (it printed a traceback)."""
    done = cli("vaults", "--db", f"postgresql://nobody@127.0.0.1:{free_port()}/x")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("memsync: error: cannot connect to postgresql://nobody@")
    assert len(done.stderr.splitlines()) == 1


def test_clicks_own_ends_pass_the_boundary_as_click_says_them() -> None:
    """A prompt answered with Ctrl-D is click's Abort ("Aborted!"), not "memsync: error: Abort"."""
    import click

    from memsync.cli.common import within_the_boundary

    def abort() -> None:
        raise click.Abort()

    with pytest.raises(click.Abort):
        within_the_boundary(abort)
