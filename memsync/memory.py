"""The library entry point behind `memsync query` and `memsync mcp`: one index opened for answering.

A one-shot query opens it, answers and closes; the MCP server keeps it open (vectors in memory,
the query embedder loaded once) and sees the watcher's changes through SQLite's data_version.
Before answering it brings the text up to date when no writer keeps it fresh (stat-only when
nothing changed); an agent's write is indexed before the write returns.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .config import Config
from .embedders import Embedder, embedder_for_index
from .errors import IndexNotFound, LockError, VaultTaken
from .locate import Location
from .origin import Origin, this_host
from .search import Options, Outcome, search
from .store import ModelKey
from .sync import Report, Syncer, behind_notice, refresh_text
from .vault import IgnoreRules

log = logging.getLogger("memsync.memory")
WRITE_SYNC_WAIT = 5.0  # seconds an agent's write waits for a running watcher to index it


class Memory:
    def __init__(self, config: Config, location: Location, *, long_lived: bool = False) -> None:
        self.config = config
        self.location = location
        self.store = location.open(vectors_in_memory=long_lived)
        self._embedder: tuple[ModelKey | None, Embedder | None, str] | None = None

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @property
    def origin(self) -> Origin:
        return Origin.of(self.store.meta())

    @property
    def vault(self) -> Path | None:
        """The vault's folder where this machine is the vault's host; None elsewhere, where a
        folder at the same path is not the vault."""
        origin = self.origin
        return Path(origin.path) if origin.path and origin.here(self.location.shared) else None

    def vault_root(self) -> Path:
        """The vault, for reading and writing notes; IndexNotFound if it is not here now."""
        origin = self.origin
        if origin.path and not origin.here(self.location.shared):
            raise IndexNotFound(
                f"the vault of {self.location} is {origin.where()}, not on this machine: its "
                "notes are read there"
            )
        root = self.vault
        if root is None or not root.is_dir():
            raise IndexNotFound(
                f"the vault of {self.location} is not there now ({root}): is it mounted?"
            )
        return root

    def rules(self) -> IgnoreRules:
        return IgnoreRules(self.vault_root())

    def search(self, text: str, options: Options) -> Outcome:
        """What `memsync query` prints: the text refreshed first, the index's own model for the
        query, and every reason a leg did not run among the notices."""
        root = self.vault
        stale = ""
        if root is not None and root.is_dir():
            if self.location.shared:  # a shared index is written by its writer only
                stale = behind_notice(self.store, self.location, root)
            else:
                stale = refresh_text(self.store, self.location, root, self.config.max_file_bytes)
        embedder, why = (None, "")
        if options.mode != "keyword":
            embedder, why = self._query_embedder()
        outcome = search(self.store, text, options, embedder, why)
        if stale:
            outcome.notices.append(stale)
        return outcome

    def check_writable_here(self) -> None:
        """An agent may write only where the vault is: on its host (VaultTaken elsewhere)."""
        origin = self.origin
        if origin.path and not origin.here(self.location.shared):
            raise VaultTaken(
                f"--writable: the vault of {self.location} is {origin.where()}, not on "
                f"{this_host()}: run memsync mcp --writable there, or without --writable here"
            )

    def _query_embedder(self) -> tuple[Embedder | None, str]:
        """Loaded once per model: a long-lived server must not reload it for every query."""
        key = self.store.model_key()
        if self._embedder is None or self._embedder[0] != key:
            embedder, why = embedder_for_index(self.config, key)
            self._embedder = (key, embedder, why)
        return self._embedder[1], self._embedder[2]

    def sync_note(self, rel: str, digest: str) -> bool:
        """Index a note just written, before the write returns: under the writer lock when nobody
        holds it, else by waiting (WRITE_SYNC_WAIT at most) for the watcher to see it. True when
        the index holds the note whose bytes hash to `digest`."""
        holder = self.location.holder()
        if holder is None or holder.get("role") != "watch":
            try:
                with self.location.writer_lock("mcp-write"):
                    Syncer(self.store, self.vault_root(), self.config.max_file_bytes).sync_paths(
                        [rel], Report()
                    )
            except LockError:
                pass  # an index run or a watcher that just started: it will see the file
            except Exception as exc:  # noqa: BLE001 - the note is written; say it is not indexed
                log.warning("wrote %s but could not index it: %s", rel, exc)
                return False
        deadline = time.monotonic() + WRITE_SYNC_WAIT
        while True:
            if self.store.file_hashes([rel]).get(rel) == digest:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
