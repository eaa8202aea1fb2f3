"""Which index a command means: --db (a SQLite file or a postgresql:// URL with --name),
MEMSYNC_DB, --vault, the vault around the cwd, or the only one.

A `Location` is where one vault's index lives; it opens the store, makes the writer lock and reads
who holds it, so nothing else needs to know which backend is behind it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..config import (
    EF_SEARCH,
    RESERVED_NAMES,
    Config,
    checked_name,
    current,
    default_db_path,
    is_postgres,
)
from ..errors import AmbiguousIndex, IndexNotFound, StoreError, os_reason
from ..redact import redact
from .origin import Owner

if TYPE_CHECKING:
    from .lock import WriterLock
    from .protocols import StoreWriter


class Location(Protocol):
    # readers on other machines share it: they never write it, and read the vault only on its host
    shared: ClassVar[bool]
    rename: ClassVar[str]  # how a writer chooses another index: the flag to change

    def open(self, *, create: bool = False, vectors_in_memory: bool = False) -> StoreWriter: ...
    def writer_lock(self, role: str) -> WriterLock: ...
    def holder(self) -> dict[str, Any] | None: ...
    def size(self) -> int: ...
    def forget(self) -> None: ...
    def __str__(self) -> str:  # safe to print: never a password
        ...


@dataclass(frozen=True)
class SqliteLocation:
    path: Path  # absolute wherever a command's --db names it: the process's folder is not its
    shown: str | None = field(default=None, compare=False)  # the --db as given, for messages
    shared: ClassVar[bool] = False
    rename: ClassVar[str] = "--db"

    def open(self, *, create: bool = False, vectors_in_memory: bool = False) -> StoreWriter:
        from .sqlite_store import SqliteStore

        return SqliteStore(self.path, create=create, vectors_in_memory=vectors_in_memory)

    def writer_lock(self, role: str) -> WriterLock:
        from .lock import FileLock

        return FileLock(self.path, role)

    def holder(self) -> dict[str, Any] | None:
        from .lock import read_holder

        return read_holder(self.path)

    def files(self) -> list[Path]:
        """The index on disk: the database, its write-ahead log and shared memory, its lock."""
        from .lock import lock_path

        side = [self.path.with_name(self.path.name + end) for end in ("-wal", "-shm", "-journal")]
        return [self.path, *side, lock_path(self.path)]

    def size(self) -> int:
        return sum(path.stat().st_size for path in self.files() if path.exists())

    def forget(self) -> None:
        """Remove the index's files, under its writer lock: refused while a writer holds it."""
        from .lock import FileLock

        lock = FileLock(self.path, "forget")
        lock.advice = "stop it first, then forget the index"
        *index, lock_file = self.files()
        with lock:
            _remove(index)
        _remove([lock_file])  # once released: Windows removes no file a process holds open

    def __str__(self) -> str:
        return self.shown or str(self.path)


def _remove(paths: list[Path]) -> None:
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot remove {path}: {os_reason(exc)}") from exc


@dataclass(frozen=True)
class PostgresLocation:
    url: str
    name: str  # the vault's schema
    ef_search: int = EF_SEARCH  # the HNSW search list: recall against latency
    shared: ClassVar[bool] = True
    rename: ClassVar[str] = "--name"

    def open(self, *, create: bool = False, vectors_in_memory: bool = False) -> StoreWriter:
        from .pg_store import PgStore

        return PgStore(
            self.url,
            self.name,
            create=create,
            ef_search=self.ef_search,
            vectors_in_memory=vectors_in_memory,
        )

    def writer_lock(self, role: str) -> WriterLock:
        from .pg_lock import AdvisoryLock

        return AdvisoryLock(self.url, self.name, role)

    def holder(self) -> dict[str, Any] | None:
        from .pg_lock import read_holder

        return read_holder(self.url, self.name)

    def size(self) -> int:
        from .pg_schema import schema_size

        return schema_size(self.url, self.name)

    def forget(self) -> None:
        """Drop the vault's schema and its registration: only its owner may, and not while a
        writer holds it."""
        from .pg_schema import drop_vault

        drop_vault(self.url, self.name)

    def __str__(self) -> str:
        return f"{redact(self.url)} (vault {self.name})"


def owner_of(location: Location, replace: bool = False) -> Owner:
    """Who may write the index at `location`, as its claim and its refusal name it."""
    return Owner(str(location), location.shared, location.rename, replace)


def check_writer(location: Location, root: Path, replace: bool) -> Owner:
    """Before a writer takes the lock: refuse a folder that is not the index's vault, having
    written nothing. The syncer claims the vault again under the lock."""
    owner = owner_of(location, replace)
    try:
        store = location.open()
    except (IndexNotFound, StoreError):
        return owner  # no index yet (or one the writer's own open reports on)
    with store:
        owner.claim(store.meta(), root)
    return owner


def default_name(vault: Path) -> str:
    """The vault folder's name, as a schema name: `My Notes` -> `my_notes`."""
    slug = re.sub(r"[^a-z0-9_-]+", "_", Path(os.path.realpath(vault)).name.lower()).strip("_-")
    slug = slug[:50] or "vault"
    return f"v_{slug}" if slug in RESERVED_NAMES or slug.startswith("pg_") else slug


def for_vault(vault: Path, config: Config) -> Location:
    """Where a writer (index, watch) keeps `vault`'s index."""
    if config.db and is_postgres(config.db):
        name = checked_name(config.name or default_name(vault))
        return PostgresLocation(config.db, name, config.ef_search)
    return _named_file(config.db) if config.db else SqliteLocation(default_db_path(vault))


def _named_file(db: str) -> SqliteLocation:
    """The SQLite file a --db (or MEMSYNC_DB) names, from the command's own folder (its real
    path: one file however a client's folder names it), shown as given."""
    invocation = current()
    real = Path(os.path.realpath(invocation.path(db)))
    return SqliteLocation(real, str(invocation.expanded(db)))


@dataclass(frozen=True)
class KnownIndex:
    db: Path
    vault: Path | None


def index_folder() -> Path:
    """Where the SQLite index of each vault is made, unless --db names another file."""
    return default_db_path(Path("vault")).parent


def known_indexes() -> list[KnownIndex]:
    """Every SQLite index in the data folder, with the vault each one records."""
    from .sqlite_store import SqliteStore

    folder = index_folder()
    found = []
    for db in sorted(folder.glob("*.sqlite")) if folder.is_dir() else []:
        try:
            with SqliteStore(db, create=False) as store:
                vault = store.meta().get("vault_path")
        except Exception:  # an unreadable index is listed without its vault
            vault = None
        found.append(KnownIndex(db, Path(vault) if vault else None))
    return found


def vaults_at(url: str) -> list[PostgresLocation]:
    """Every vault indexed in the PostgreSQL database at `url`."""
    from .pg_connect import vault_names

    return [PostgresLocation(url, name) for name in vault_names(url)]


def _postgres(config: Config) -> Location:
    """The vault --name names in the server's database (opening it says if there is none), or
    the database's only vault."""
    from .pg_connect import vault_names

    assert config.db is not None
    if config.name:
        return PostgresLocation(config.db, config.name, config.ef_search)
    names = vault_names(config.db)
    if len(names) == 1:
        return PostgresLocation(config.db, names[0], config.ef_search)
    if not names:
        raise IndexNotFound(
            f"no vault is indexed in {redact(config.db)} yet: run memsync index VAULT --db URL"
        )
    raise AmbiguousIndex(
        f"{redact(config.db)} holds several vaults, name one with --name: {', '.join(names)}"
    )


def locate(config: Config, vault: Path | None, cwd: Path | None = None) -> Location:
    """The index to read; raises IndexNotFound listing the known vaults when it is ambiguous."""
    if config.db is not None and is_postgres(config.db):
        return _postgres(config)
    if config.db is not None:
        named = _named_file(config.db)
        if not named.path.exists():
            raise IndexNotFound(f"no index at {named}: run memsync index VAULT --db {named}")
        return named
    if vault is not None:
        db = default_db_path(vault)
        if not db.exists() and not vault.is_dir():
            raise IndexNotFound(f"vault not found: {vault}")
        if not db.exists():
            raise IndexNotFound(f"{vault} is not indexed yet: run memsync index {vault}")
        return SqliteLocation(db)
    known = known_indexes()
    here = os.path.realpath(cwd or current().cwd)
    for entry in known:
        if entry.vault is not None:
            root = os.path.realpath(entry.vault)
            if here == root or here.startswith(root.rstrip(os.sep) + os.sep):
                return SqliteLocation(entry.db)
    if len(known) == 1:
        return SqliteLocation(known[0].db)
    if not known:
        raise IndexNotFound("no vault is indexed yet: run memsync index VAULT")
    listing = "; ".join(str(k.vault or k.db) for k in known)
    raise AmbiguousIndex(
        f"several vaults are indexed, name one with --vault (memsync vaults lists them): {listing}"
    )


def to_forget(config: Config, target: str) -> tuple[Location, str]:
    """The index `memsync vaults forget TARGET` means, and its name as `memsync vaults` lists
    it: a vault's name in a PostgreSQL --db; else a vault's folder, or an index's name."""
    if config.db is not None and is_postgres(config.db):
        return PostgresLocation(config.db, checked_name(target)), target
    known = known_indexes()
    real = os.path.realpath(current().path(target))
    found = [k for k in known if k.vault and os.path.realpath(k.vault) == real] or [
        k for k in known if target in (k.db.stem, k.db.name)
    ]
    if not found:
        raise IndexNotFound(f"no index of {target} in {index_folder()} (memsync vaults lists them)")
    return SqliteLocation(found[0].db), found[0].db.stem
