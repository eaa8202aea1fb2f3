"""Which vault an index belongs to: the host and folder it was built from, recorded in its meta.

A writer of another folder is refused (two people's `notes` folders must not overwrite each other
in one database), and readers of a shared index compare files with it only on the vault's host: on
any other machine, a folder at the same path is not the vault.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config import env
from ..errors import VaultTaken

PATH_KEY = "vault_path"
HOST_KEY = "vault_host"


def this_host() -> str:
    """This machine's name as an index records it: MEMSYNC_HOST where the host name is not stable
    (a container's changes with every start), else the host name."""
    return env().get("MEMSYNC_HOST") or socket.gethostname()


@dataclass(frozen=True)
class Origin:
    host: str | None  # None: an index made before hosts were recorded
    path: str | None  # None: nothing was ever indexed into it

    @classmethod
    def of(cls, meta: Mapping[str, str]) -> Origin:
        return cls(meta.get(HOST_KEY) or None, meta.get(PATH_KEY) or None)

    def here(self, shared: bool) -> bool:
        """Whether the vault's folder is on this machine. A local index (SQLite) is a file of
        this machine's, whatever its host is called today; a shared one's vault is on its
        recorded host (unknown, so not here, until a writer of this memsync records it)."""
        return not shared or (self.host is not None and self.host == this_host())

    def where(self) -> str:
        host = f"host {self.host}" if self.host else "its writer's machine"
        return f"at {self.path} on {host}"

    def __str__(self) -> str:
        return f"{self.path} on {self.host}" if self.host else str(self.path)


@dataclass(frozen=True)
class Owner:
    """Who writes an index, for the claim and its message: a local index (SQLite) belongs to a
    folder; a shared one (PostgreSQL) to a folder on one host."""

    index: str = "this index"
    shared: bool = False
    rename: str = "--db"  # the flag that chooses another index
    replace: bool = False  # --replace: the vault really moved to this folder

    def claim(self, meta: Mapping[str, str], root: Path) -> dict[str, str]:
        """Pure: the origin facts a writer of `root` records (empty when they are recorded
        already), or VaultTaken when the index belongs to another folder. A local index follows
        its path alone: a laptop's host name changes with its network."""
        origin = Origin.of(meta)
        mine = {PATH_KEY: str(root), HOST_KEY: this_host()}
        if origin.path is None or origin.host is None or self.replace:
            return mine  # a new index, one made before hosts were recorded, or a moved vault
        if origin.path == str(root) and (not self.shared or origin.host == mine[HOST_KEY]):
            return {} if origin.host == mine[HOST_KEY] else {HOST_KEY: mine[HOST_KEY]}
        raise VaultTaken(
            f"index {self.index} holds the vault {origin}, not {root} on {mine[HOST_KEY]}: to "
            f"index {root}, choose another {self.rename}; if that vault really moved here, run "
            "again with --replace"
        )
