"""Which index a command means: --db, MEMSYNC_DB, --vault, the vault around the cwd, or the only one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .config import Config, data_dir, default_db_path
from .errors import AmbiguousIndex, IndexNotFound


@dataclass(frozen=True)
class KnownIndex:
    db: Path
    vault: Path | None


def known_indexes() -> list[KnownIndex]:
    """Every index in the data folder, with the vault each one records."""
    from .store import Store

    folder = data_dir() / "vaults"
    found = []
    for db in sorted(folder.glob("*.sqlite")) if folder.is_dir() else []:
        try:
            with Store(db, create=False) as store:
                vault = store.meta().get("vault_path")
        except Exception:  # an unreadable index is listed without its vault
            vault = None
        found.append(KnownIndex(db, Path(vault) if vault else None))
    return found


def db_for_vault(vault: Path, config: Config) -> Path:
    return config.db or default_db_path(vault)


def locate(config: Config, vault: Path | None, cwd: Path | None = None) -> Path:
    """The database to read; raises IndexNotFound listing the known vaults when it is ambiguous."""
    if config.db is not None:
        if not config.db.exists():
            raise IndexNotFound(
                f"no index at {config.db}: run memsync index VAULT --db {config.db}"
            )
        return config.db
    if vault is not None:
        db = default_db_path(vault)
        if not db.exists():
            raise IndexNotFound(f"{vault} is not indexed yet: run memsync index {vault}")
        return db
    known = known_indexes()
    here = os.path.realpath(cwd or Path.cwd())
    for entry in known:
        if entry.vault is not None:
            root = os.path.realpath(entry.vault)
            if here == root or here.startswith(root.rstrip(os.sep) + os.sep):
                return entry.db
    if len(known) == 1:
        return known[0].db
    if not known:
        raise IndexNotFound("no vault is indexed yet: run memsync index VAULT")
    listing = "; ".join(str(k.vault or k.db) for k in known)
    raise AmbiguousIndex(f"several vaults are indexed, name one with --vault: {listing}")
