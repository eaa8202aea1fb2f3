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
from ..vectors import centroid, from_blob, window_cosines
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


def nearest_to_probes(
    store: StoreReader, probes: Sequence[ChunkRow], pool: int, only: NoteFilter
) -> list[int]:
    """Related notes' candidates: the `pool` chunks nearest each probe's mean vector (a chunk
    of the note asked about; MAX_PROBES of them, spread over a long note), each once."""
    dims = store.dims() or 0
    found: dict[int, None] = {}
    for probe in spread(probes, MAX_PROBES):
        assert probe.embedding is not None
        mean = from_blob(centroid(probe.embedding, dims))
        found.update(dict.fromkeys(i for i, _ in store.vector_search(mean, pool, only)))
    return list(found)


def probe_scores(
    store: StoreReader, probes: Sequence[ChunkRow], rows: Mapping[int, ChunkRow]
) -> tuple[dict[int, float], dict[int, int]]:
    """Each candidate's best calibrated cosine with any probe, its windows against each probe's
    mean vector as a query's against the question (so a chunk the keyword side found beyond the
    vector pool has its cosine, not 0), and which of its windows is nearest that best probe."""
    dims = store.dims() or 0
    sample = store.sample_vectors(SAMPLE_CHUNKS)
    ids = [i for i, row in rows.items() if row.embedding]
    scores: dict[int, float] = {}
    windows: dict[int, int] = {}
    for probe in spread(probes, MAX_PROBES):
        assert probe.embedding is not None
        mean = from_blob(centroid(probe.embedding, dims))
        each = {i: window_cosines(rows[i].embedding or b"", mean) for i in ids}
        calibrated = calibrate_by_script(
            np.array([float(each[i].max()) for i in ids]),
            [rows[i].script for i in ids],
            sample.best_cosines(mean),
            sample.sampled_from,
            probe.script,
        )
        for i, score in zip(ids, calibrated):
            if float(score) > scores.get(i, -1.0):
                scores[i], windows[i] = float(score), int(each[i].argmax())
    return scores, windows
