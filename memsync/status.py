"""What `memsync status` reports: facts read from the index, the lock and a stat-only walk."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .errors import MemsyncError
from .redact import redact
from .store.locate import Location, SqliteLocation, index_folder, known_indexes, vaults_at
from .store.origin import Origin
from .store.protocols import StoreReader
from .sync.syncer import drift, rules_current


def gather(location: Location, opened: StoreReader | None = None) -> dict[str, Any]:
    """Never claims 'up to date' unless every note on disk matches its files row by stat; the
    notes are compared only on the vault's host (elsewhere a folder at that path is not it).
    `opened`: the location's store, already open (else it is opened for this)."""
    with nullcontext(opened) if opened is not None else location.open() as store:
        meta = store.meta()
        counts = store.counts()
        skips = store.skip_rows()
        warnings = store.file_warnings()
        backend = store.vector_backend
        in_memory = store.keeps_mean_vectors
        read_only = store.read_only
        behind = store.behind
        links = store.link_counts() if store.has_links else None
        origin = Origin.of(meta)
        vault = Path(origin.path) if origin.path else None
        here = origin.here(location.shared)
        disk: dict[str, Any] = {"present": False, "here": here}
        if vault is not None and here and vault.is_dir():
            disk = {"present": True, "here": True, **asdict(drift(vault, store))}
    holder = location.holder()
    last_sync = _last_sync(meta)
    # an index chunked by an older memsync's rules: `index` (or `watch`) chunks every note again
    current = rules_current(meta) or not counts["files"]
    in_step = (
        current
        and bool(disk["present"])
        and not (disk["new"] or disk["changed"] or disk["removed"])
    )
    return {
        "vault": str(vault) if vault else None,
        "vault_host": origin.host,
        "db": str(location),
        "schema_version": int(meta.get("schema_version", 0)),
        "schema_behind": behind,  # "": this release's schema
        "provider": meta.get("provider"),
        "model": meta.get("model"),
        "dims": int(meta["dims"]) if meta.get("dims") else None,
        "vector_backend": backend,  # the index's, as every reader reports it
        "vectors_in_memory": in_memory,  # this reader (a server) searches its own copy instead
        "files_indexed": counts["files"],
        "chunks": counts["chunks"],
        "chunks_embedded": counts["embedded"],
        "chunks_pending": counts["pending"],
        **({"links": links[0], "unresolved_links": links[1]} if links else {}),
        "disk": disk,
        "rules_current": current,
        "text_up_to_date": in_step,
        "complete": in_step and counts["pending"] == 0,
        "last_sync": last_sync,
        "last_sync_age_s": _age(last_sync),
        "writer": holder,
        "read_only": read_only,
        "warnings": [{"path": p, "warning": w} for p, w in warnings],
        "skipped": [
            {"path": s.path, "reason": s.reason}
            for s in sorted(skips.values(), key=lambda s: s.path)
        ],
    }


def glance(location: Location, store: StoreReader) -> dict[str, Any]:
    """The facts a page's header shows on every render, as `gather` gives them, read without
    walking the vault (a walk of every note on each page would cost more than the page)."""
    meta = store.meta()
    counts = store.counts()
    last_sync = _last_sync(meta)
    return {
        "model": meta.get("model"),
        "files_indexed": counts["files"],
        "chunks": counts["chunks"],
        "chunks_pending": counts["pending"],
        "last_sync": last_sync,
        "last_sync_age_s": _age(last_sync),
        "writer": location.holder(),
    }


def _last_sync(meta: dict[str, str]) -> float | None:
    return float(meta["last_sync"]) if meta.get("last_sync") else None


def _age(moment: float | None) -> float | None:
    return round(time.time() - moment, 1) if moment else None


def vaults_in(url: str) -> dict[str, Any]:
    """`memsync vaults --db postgresql://...` (and `status` without --name): the vaults that
    database holds; one this user cannot read is listed with the reason, in one line."""
    return {
        "db": redact(url),
        "postgresql": True,
        "vaults": [vault_facts(location, location.name) for location in vaults_at(url)],
    }


def indexes_here() -> dict[str, Any]:
    """`memsync vaults`: this user's SQLite indexes in the data folder, by name (the file's)."""
    return {
        "db": str(index_folder()),
        "postgresql": False,
        "vaults": [
            vault_facts(SqliteLocation(known.db), known.db.stem) for known in known_indexes()
        ],
    }


def vault_facts(location: Location, name: str) -> dict[str, Any]:
    """One line of `memsync vaults`, read from the index and its lock (no walk of the notes)."""
    try:
        with location.open() as store:
            meta = store.meta()
            counts = store.counts()
        writer = location.holder()
        size = location.size()
    except MemsyncError as exc:
        return {"name": name, "db": str(location), "error": str(exc)}
    origin = Origin.of(meta)
    here = origin.here(location.shared)
    last_sync = _last_sync(meta)
    return {
        "name": name,
        "vault": origin.path,
        "vault_host": origin.host,
        # whether the notes' folder is still there; None where it is on another machine
        "vault_exists": Path(origin.path).is_dir() if origin.path and here else None,
        "db": str(location),
        "files": counts["files"],
        "chunks": counts["chunks"],
        "chunks_pending": counts["pending"],
        "model": meta.get("model"),
        "size_bytes": size,
        "last_sync": last_sync,
        "last_sync_age_s": _age(last_sync),
        "writer": writer,
    }
