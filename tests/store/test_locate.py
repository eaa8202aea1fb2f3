"""locate: which index a command means; for_vault: where a writer keeps a vault's index."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.config import load_config
from memsync.errors import AmbiguousIndex, ConfigError, IndexNotFound
from memsync.store.locate import (
    PostgresLocation,
    SqliteLocation,
    default_name,
    for_vault,
    known_indexes,
    locate,
)
from memsync.sync.syncer import index_vault
from tests.conftest import write


def _index(root: Path) -> Path:
    write(root, "a.md", "# A\n\nwords\n")
    location = for_vault(root, load_config())
    assert isinstance(location, SqliteLocation)
    with location.open(create=True) as store:
        index_vault(store, root, 1 << 20, None)
    return location.path


def test_a_writer_s_index_is_a_file_per_vault_or_a_schema_named_after_the_folder(
    tmp_path: Path,
) -> None:
    first = for_vault(tmp_path / "notes", load_config())
    other = for_vault(tmp_path / "other" / "notes", load_config())
    assert isinstance(first, SqliteLocation) and first != other  # two folders, two files
    pg = for_vault(tmp_path / "My Notes", load_config(db="postgresql://u@h/db"))
    assert pg == PostgresLocation("postgresql://u@h/db", "my_notes") and pg.shared
    named = for_vault(tmp_path / "x", load_config(db="postgresql://u@h/db", name="team"))
    assert isinstance(named, PostgresLocation) and named.name == "team"
    assert default_name(tmp_path / "public") == "v_public"
    assert default_name(tmp_path / "pg_stuff") == "v_pg_stuff"
    with pytest.raises(ConfigError, match="cannot name a vault"):
        load_config(db="postgresql://u@h/db", name="Bad Name")


def test_readers_find_the_vault_around_the_folder_or_the_only_one_or_say_which_exist(
    tmp_path: Path,
) -> None:
    config = load_config()
    with pytest.raises(IndexNotFound, match="no vault is indexed yet"):
        locate(config, None, cwd=tmp_path)
    a = _index(tmp_path / "a")
    assert locate(config, None, cwd=tmp_path) == SqliteLocation(a)  # the only one
    b = _index(tmp_path / "b")
    assert {k.db for k in known_indexes()} == {a, b}
    assert locate(config, None, cwd=tmp_path / "b") == SqliteLocation(b)  # the one around the cwd
    with pytest.raises(AmbiguousIndex, match="several vaults are indexed"):
        locate(config, None, cwd=tmp_path)
    assert locate(config, tmp_path / "a") == SqliteLocation(a)
    (tmp_path / "c").mkdir()
    with pytest.raises(IndexNotFound, match="is not indexed yet"):
        locate(config, tmp_path / "c")
    with pytest.raises(IndexNotFound, match="vault not found"):  # nor a folder there
        locate(config, tmp_path / "d")
    with pytest.raises(IndexNotFound, match="no index at"):
        locate(load_config(db=str(tmp_path / "none.sqlite")), None)
