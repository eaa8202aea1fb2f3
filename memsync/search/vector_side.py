"""The vector leg and what its vectors say of the candidates: the question embedded, the nearest
chunks found through the store, their cosines calibrated (cosines) and each candidate's windows
scored once. The one module of a search that loads numpy and the vectors' code: the pipeline
imports it only when the vector leg runs, so a keyword query never loads them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..embedders import Embedder
from ..errors import EmbeddingError
from ..filters import NoteFilter
from ..store.protocols import ChunkRow, StoreReader
from ..vectors import COARSE, centroid, from_blob, unit_rows, window_cosines, window_rows
from .cosines import MIN_NOTES, calibrate_by_script, script_shift_range
from .options import SAMPLE_CHUNKS, Options, pool_size
from .query import Query


@dataclass(frozen=True)
class VectorScores:
    """The vector leg's say on the candidates, by chunk id."""

    calibrated: Mapping[int, float] = field(default_factory=dict)
    cosines: Mapping[int, float] = field(default_factory=dict)  # each one's nearest window's
    windows: Mapping[int, np.ndarray] = field(default_factory=dict)  # each window's cosine


@dataclass(frozen=True)
class VectorLeg:
    """What the vector leg found: the chunks nearest the question with their cosines, and the
    sample they are calibrated against (each sampled chunk's nearest-window cosine, and its
    script and note)."""

    ran: bool = False  # the question was embedded and the vectors searched
    notices: tuple[str, ...] = ()
    query_vector: np.ndarray | None = None  # None when nothing was found
    cosines: Mapping[int, float] = field(default_factory=dict)
    sample_cosines: np.ndarray | None = None
    sampled_from: Sequence[tuple[str, str]] = ()
    waiting: int = 0  # chunks with no vector yet, found by keyword only

    def scored(
        self, rows: Mapping[int, ChunkRow], found_by_keyword: Sequence[int], query_script: str
    ) -> VectorScores:
        """The candidates' calibrated vector scores. A chunk the keyword leg found beyond this
        leg's pool has vectors all the same: its cosine, not 0, goes into the fusion. Each
        candidate's windows are scored once, for its cosine and the lines it shows."""
        if self.query_vector is None or self.sample_cosines is None:
            return VectorScores()
        query = self.query_vector
        windows = {i: window_cosines(r.embedding, query) for i, r in rows.items() if r.embedding}
        cosines = dict(self.cosines)
        for i in found_by_keyword:
            if i not in cosines and i in windows:
                cosines[i] = float(windows[i].max())
        ids = [i for i in cosines if i in rows]
        calibrated = calibrate_by_script(
            np.array([cosines[i] for i in ids]),
            [rows[i].script for i in ids],
            self.sample_cosines,
            self.sampled_from,
            query_script,
        )
        return VectorScores({i: float(s) for i, s in zip(ids, calibrated)}, cosines, windows)


def vector_leg(store: StoreReader, query: Query, options: Options, embedder: Embedder) -> VectorLeg:
    """The question embedded, then its nearest chunks: a pool cut on the cosines as ranked."""
    try:
        query_vector = embedder.embed_query(query.text)
    except EmbeddingError as exc:
        return VectorLeg(notices=(f"vector search unavailable: {exc}",))
    waiting = store.pending_count()
    pool = pool_size(options.limit)
    sample = store.sample_vectors(SAMPLE_CHUNKS)
    probes = sample.probes(query_vector, query.script, MIN_NOTES)
    # the mean vectors choose as many as the limit asks for (a larger first step costs 14% at
    # 100k chunks); the pool is cut from every chunk they chose
    nearest = store.vector_search(
        query_vector, options.limit * 4, options.only, probes=probes, every=True
    )
    if not nearest:
        return VectorLeg(ran=True, waiting=waiting)
    sample_cosines = sample.best_cosines(query_vector)
    # the pool is cut on the cosines as ranked: a chunk of another script, moved up by
    # calibrate_by_script, must not depend on how many results were asked for
    last = nearest[min(pool, len(nearest)) - 1][1]
    reach = last + script_shift_range(sample_cosines, sample.sampled_from)
    hits = nearest[:pool] + [(i, d) for i, d in nearest[pool:] if d <= reach]
    return VectorLeg(
        True,
        (),
        query_vector,
        {i: 1.0 - d for i, d in hits},
        sample_cosines,
        sample.sampled_from,
        waiting,
    )


# -- related notes: the note's own chunks ask, in the place of a question ------------------------

MAX_PROBES = 8  # the note's chunks whose vectors look for neighbours: a long note's, spread


def spread(items: Sequence[ChunkRow], size: int) -> list[ChunkRow]:
    """Up to `size` of `items`, spread evenly from the first to the last."""
    if len(items) <= size:
        return list(items)
    step = (len(items) - 1) / (size - 1)
    return [items[round(k * step)] for k in range(size)]


# candidates the note's mean vector brings, per candidate asked for: one product over the vault's
# mean vectors (one per probe cost each its own pass over them) with a pool twice as deep found as
# many neighbours (benchmarks/NOTES.md)
PROBE_POOL = 2


def nearest_to_probes(
    store: StoreReader, means: np.ndarray, pool: int, only: NoteFilter
) -> list[int]:
    """Related notes' candidates: the chunks nearest the mean of the probes' mean vectors."""
    mean = means.mean(axis=0)
    direction = mean / (np.linalg.norm(mean) or 1.0)
    # every chunk the coarse step chose (coarse_pool of the limit): probe_scores scores them
    # exactly against each probe, so the store's own rescoring would be done twice
    limit = max(pool * PROBE_POOL // COARSE, 1)
    return [i for i, _ in store.vector_search(direction, limit, only, every=True)]


def probe_means(
    store: StoreReader, probes: Sequence[ChunkRow]
) -> tuple[list[ChunkRow], np.ndarray]:
    """The probes related notes ask by (MAX_PROBES of a note's chunks, spread over a long
    note), and the mean vector of each, one a row."""
    dims = store.dims() or 0
    chosen = spread(probes, MAX_PROBES)
    return chosen, np.array([from_blob(centroid(p.embedding or b"", dims)) for p in chosen])


def probe_scores(
    store: StoreReader,
    probes: Sequence[ChunkRow],
    means: np.ndarray,
    rows: Mapping[int, ChunkRow],
) -> tuple[dict[int, float], dict[int, int]]:
    """Each candidate's best calibrated cosine with any probe, its windows against each probe's
    mean vector as a query's against the question (so a chunk the keyword side found beyond the
    vector pool has its cosine, not 0), and which of its windows is nearest that best probe."""
    ids = [i for i, row in rows.items() if row.embedding]
    if not ids:
        return {}, {}
    counts, windows = window_rows([rows[i].embedding or b"" for i in ids], store.dims() or 0)
    # einsum, not BLAS (as vectors.nearest): BLAS threads left spinning slow what comes next
    unit = means / np.linalg.norm(means, axis=1, keepdims=True)
    similarity = np.einsum("ij,kj->ik", unit_rows(windows), unit)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    cosines = np.maximum.reduceat(similarity, starts, axis=0)  # each chunk's best window, per probe
    sample = store.sample_vectors(SAMPLE_CHUNKS)
    scripts = [rows[i].script for i in ids]
    calibrated = np.column_stack(
        [
            calibrate_by_script(
                cosines[:, k],
                scripts,
                sample.best_cosines(mean),
                sample.sampled_from,
                probe.script,
            )
            for k, (mean, probe) in enumerate(zip(means, probes))
        ]
    )
    best = calibrated.argmax(axis=1)
    scores = {i: float(calibrated[n, best[n]]) for n, i in enumerate(ids)}
    nearest = {
        i: int(similarity[starts[n] : starts[n] + counts[n], best[n]].argmax())
        for n, i in enumerate(ids)
    }
    return scores, nearest
