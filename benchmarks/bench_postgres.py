"""The PostgreSQL store's figures next to SQLite's; prints Markdown tables (no timed asserts).

    python -m benchmarks.bench_postgres [--db postgresql://...] [--chunks 100000] [--notes 10000]

Without --db a pgserver (PostgreSQL 16 + pgvector 0.6, from the test extra) is started in a
temporary folder: the server runs on this machine, so the figures carry no network round trip.

- HNSW recall@10 against exact search, for several ef_search values, on the generated index of
  bench_query with vectors shaped like real ones: each a mix of two or three vectors the local
  model made of sample_vault's chunks, plus noise (random unit vectors, which have no structure at
  all, are no model's output: HNSW's recall on them is far lower, and is printed too), and the
  in-process hybrid p50 a reader gets with each (the `ef_search` setting).
- Query latency in-process (hybrid, the local model embedding each query) on that index, whole and
  filtered to 0.5%, where each query's time goes (each leg alone), and `memsync query` as a whole
  process on sample_vault/ (or --vault).
- Text-only indexing and no-op re-index of a generated vault of --notes notes, both backends.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.common import (
    QUERIES,
    ROOT,
    SAMPLE_VAULT,
    build,
    in_process,
    keep_option,
    make_vault,
    random_vectors,
    start_pgserver,
    timed,
    whole_process,
    window_counts,
    workspace,
)
from memsync import fts
from memsync.chunking import chunk_text
from memsync.config import EF_SEARCH
from memsync.embed.local import LocalEmbedder
from memsync.filters import note_filter
from memsync.search.options import Options
from memsync.search.pipeline import search
from memsync.store.locate import Location, PostgresLocation, SqliteLocation
from memsync.store.pg_vectors import HNSW_EF_CONSTRUCTION, HNSW_M
from memsync.store.protocols import StoreWriter as Store
from memsync.sync.syncer import index_vault
from memsync.vectors import coarse_pool, rescored

EF_VALUES = (100, 200, 400, 800)
SAMPLE_QUERIES = ROOT / "benchmarks" / "sample_queries.json"


def start_server(workdir: Path, servers: contextlib.ExitStack) -> str:
    """A pgserver in `workdir`, stopped when `servers` closes."""
    server = servers.enter_context(start_pgserver(workdir / "pg"))
    # as an admin would set a team's server for HNSW builds (the default 64 MB holds the graph
    # of about 30k chunks; beyond, pgvector builds on disk, many times slower)
    server.psql("ALTER SYSTEM SET maintenance_work_mem = '2GB';")
    server.psql("SELECT pg_reload_conf();")
    return str(server.get_uri())


@functools.cache
def anchors(embedder: LocalEmbedder) -> np.ndarray:
    """The local model's vectors of sample_vault's chunks."""
    texts = [
        c.text
        for note in sorted(SAMPLE_VAULT.rglob("*.md"))
        for c in chunk_text(note.read_text(encoding="utf-8"))
    ]
    return embedder.embed_documents(texts)


def realistic_vectors(count: int, embedder: LocalEmbedder, seed: int = 1) -> np.ndarray:
    """Mixes of the local model's vectors of sample_vault's chunks, with a little noise: vectors
    that lie where a model's do (a few hundred directions, not all of 384-d space)."""
    rng = np.random.default_rng(seed)
    out = np.empty((count, 384), dtype=np.float32)
    for at in range(0, count, 100_000):  # in blocks: a million windows fit in a few GB
        n = min(100_000, count - at)
        picks = rng.integers(0, len(anchors(embedder)), size=(n, 3))
        weights = rng.dirichlet([1.0, 1.0, 1.0], size=n).astype(np.float32)
        mixed = np.einsum("nk,nkd->nd", weights, anchors(embedder)[picks])
        mixed += rng.normal(scale=0.02, size=mixed.shape).astype(np.float32)
        out[at : at + n] = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
    return out


def realistic_windows(counts: np.ndarray, embedder: LocalEmbedder) -> np.ndarray:
    """Each chunk's windows: half a mix of its own, half a mix of the window's, so that windows
    of one chunk are nearer each other than other chunks' are, as the model's are (on
    sample_vault: 0.90 within a chunk, 0.84 between chunks; these: 0.94 and 0.89)."""
    shared = np.repeat(realistic_vectors(len(counts), embedder), counts, axis=0)
    shared += realistic_vectors(int(counts.sum()), embedder, seed=5)
    shared /= np.linalg.norm(shared, axis=1, keepdims=True)
    return shared


def exact_top(
    counts: np.ndarray, windows: np.ndarray, queries: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The 10 chunks nearest to each query by their nearest window, (every window scanned, the
    two steps with an exact scan of the mean vectors instead of HNSW)."""
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    means = np.add.reduceat(windows, starts) / counts[:, None]
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    scanned, stepped = [], []
    for query in queries:
        best = np.maximum.reduceat(windows @ query, starts)
        scanned.append(np.argsort(-best)[:10])
        pool = np.argsort(-(means @ query))[: coarse_pool(10)]
        stepped.append(pool[np.argsort(-best[pool])][:10])
    return np.array(scanned), np.array(stepped)


def chunk_ids(store: Store) -> list[int]:
    """Every chunk's id, in the order build() wrote them (the order of the generated windows)."""
    return [i for i, *_ in store.pending_chunks(store.counts()["chunks"] + 1, any_chunk=True)]


def share(found: set[int], truth: np.ndarray, ids: list[int]) -> float:
    """How much of the exact top 10 (rows of the generated windows) `found` holds."""
    return len(found & {ids[t] for t in truth}) / 10


def recall(
    where: PostgresLocation, exact: np.ndarray, queries: np.ndarray, efs: Sequence[int]
) -> dict[int, float]:
    """Mean share of the exact top 10 that the two-step search (HNSW over the chunks' mean
    vectors, the nearest 100 scored by their windows) returns, per ef_search."""
    found: dict[int, float] = {}
    with where.open() as store:
        ids = chunk_ids(store)
        for ef in efs:
            store.ef_search = ef  # type: ignore[attr-defined]
            shares = []
            for query, truth in zip(queries, exact):
                shares.append(share({i for i, _ in store.vector_search(query, 10)}, truth, ids))
            found[ef] = float(np.mean(shares))
    return found


GRAPHS = {  # name -> (the graph's expression and operators, the query's side, candidates)
    "vector": ("(centroid::vector({d})) vector_cosine_ops", "centroid::vector({d}) <=> %s", 1),
    "halfvec": (
        "(centroid::halfvec({d})) halfvec_cosine_ops",
        "centroid::halfvec({d}) <=> %s::halfvec({d})",
        1,
    ),
    "binary": (
        "(binary_quantize(centroid)::bit({d})) bit_hamming_ops",
        "binary_quantize(centroid)::bit({d}) <~> binary_quantize(%s::vector)",
        4,  # binary codes are coarse: 4x the candidates, re-ranked by the full mean vector
    ),
}


def quantized(where: PostgresLocation, stepped: np.ndarray, queries: np.ndarray) -> None:
    """pgvector >= 0.7: the mean vectors' graph in full and half precision and as binary codes
    (expression indexes beside memsync's own graph): build time, size, the graph step's p50 and
    the two steps' recall@10 against an exact first step."""
    with where.open() as store:
        conn = store.conn  # type: ignore[attr-defined]
        version = store._extension_version()  # type: ignore[attr-defined]
        if store._pgvector() < (0, 7):  # type: ignore[attr-defined]
            print(f"\nhalfvec and binary: not measured, pgvector {version} has neither (0.7+)")
            return
        dims = store.dims() or 0
        ids = chunk_ids(store)
        windows = dict(conn.execute("SELECT id, embedding FROM chunks").fetchall())
        conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        print(f"\npgvector {version}, ef_search {EF_SEARCH}:\n")
        print(
            "| graph over the mean vectors | build (s) | size (MB) | graph step p50 (ms) | recall@10 vs exact first step |"
        )
        print("|---|---|---|---|---|")
        own = store._centroid_kind()  # type: ignore[attr-defined]
        kinds = {
            f"{own} (memsync's)": (None, f"centroid <=> %s::{own}", 1),
            **{k: v for k, v in GRAPHS.items() if k != own},
        }
        for kind, (expression, distance, widen) in kinds.items():
            index, built = "chunks_hnsw", float("nan")
            if expression:
                index = f"bench_{kind}"
                started = time.perf_counter()
                conn.execute(
                    f"CREATE INDEX {index} ON chunks USING hnsw ({expression.format(d=dims)}) "
                    f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
                )
                built = time.perf_counter() - started
            (size,) = conn.execute("SELECT pg_relation_size(%s)", (index,)).fetchone()
            timings, shares = [], []
            for query, truth in zip(queries, stepped):
                vector = np.asarray(query, dtype=np.float32)
                started = time.perf_counter()
                found = [
                    i
                    for (i,) in conn.execute(
                        f"SELECT id FROM chunks ORDER BY {distance.format(d=dims)} LIMIT %s",
                        (vector, coarse_pool(10) * widen),
                    )
                ]
                if widen > 1:  # re-ranked by the full mean vector
                    found = [
                        i
                        for (i,) in conn.execute(
                            "SELECT id FROM chunks WHERE id = ANY(%s) ORDER BY centroid <=> "
                            f"%s::{own} LIMIT %s",
                            (found, vector, coarse_pool(10)),
                        )
                    ]
                timings.append((time.perf_counter() - started) * 1000)
                top = rescored(((i, bytes(windows[i])) for i in found), vector, 10)
                shares.append(share({i for i, _ in top}, truth, ids))
            if expression:
                conn.execute(f"DROP INDEX {index}")
            print(
                f"| {kind} | {built:.0f} | {size / 2**20:.0f} | {np.median(timings):.1f} "
                f"| {np.mean(shares):.3f} |"
            )


def sizes(where: PostgresLocation) -> tuple[float, float]:
    """(HNSW graph MB, 0 without one; chunks table with its indexes and TOAST MB)."""
    with where.open() as store:
        conn = store.conn  # type: ignore[attr-defined]
        graph, table = conn.execute(
            "SELECT coalesce(pg_relation_size(to_regclass('chunks_hnsw')), 0), "
            "pg_total_relation_size('chunks')"  # no graph below 20,000 vectors
        ).fetchone()
    return graph / 2**20, table / 2**20


def memory_load(where: PostgresLocation, embedder: LocalEmbedder) -> tuple[float, float]:
    """A long-lived reader's first vector search (it reads every mean vector), and the MB of
    vectors it then keeps."""
    query = embedder.embed_query("warm up")
    with where.open(vectors_in_memory=True) as store:
        started = time.perf_counter()
        store.vector_search(query, 24)
        loaded = time.perf_counter() - started
        count = store.counts()["chunks"] - store.pending_count()
        return loaded, count * len(query) * 4 / 1e6


def legs(where: PostgresLocation, embedder: LocalEmbedder) -> None:
    """Where a query's time goes, per query: each leg alone, then the whole hybrid search."""

    def ms(work) -> float:  # type: ignore[no-untyped-def]
        return timed(work)[0] * 1000

    print(
        "\n| query | keyword AND (ms) | keyword OR fallback (ms) | vector (ms) | hybrid, all (ms) |"
    )
    print("|---|---|---|---|---|")
    with where.open() as store:
        search(store, "warm up", Options(), embedder)
        for query in QUERIES:
            terms = fts.query_terms(query)
            found: list[object] = []
            both = ms(lambda: found.extend(store.keyword_search(terms, False, 24)[0]))  # noqa: B023
            fallback = len(found) < 6 and len(terms) > 1
            either = ms(lambda: store.keyword_search(terms, True, 24)) if fallback else 0.0  # noqa: B023
            vector = embedder.embed_query(query)
            nearest = ms(lambda: store.vector_search(vector, 24))  # noqa: B023
            total = ms(lambda: search(store, query, Options(), embedder))  # noqa: B023
            shown = f"{either:.1f}" if fallback else "-"
            print(f"| {query} | {both:.1f} | {shown} | {nearest:.1f} | {total:.1f} |")


def indexing(where: Location, root: Path) -> tuple[float, float, int]:
    """(text-only index s, no-op re-index s (best of 3), notes)."""
    with where.open(create=True) as store:
        first, report = timed(lambda: index_vault(store, root, 10 << 20, None))
        noop = min(timed(lambda: index_vault(store, root, 10 << 20, None))[0] for _ in range(3))
    return first, noop, report.added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="a postgresql:// URL (default: start a pgserver)")
    parser.add_argument(
        "--chunks", type=int, action="append", help="index sizes (default 100000; repeatable)"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="query the generated indexes already in --db instead of building them again",
    )
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument(
        "--random-vectors", action="store_true", help="random unit vectors, as bench_query"
    )
    parser.add_argument("--vault", type=Path, default=SAMPLE_VAULT, help="the process's vault")
    keep_option(parser)
    args = parser.parse_args()
    with workspace("memsync-pgbench-", args.keep) as workdir, contextlib.ExitStack() as servers:
        url = args.db or start_server(workdir, servers)
        embedder = LocalEmbedder(threads=1)  # as memsync query loads it
        with PostgresLocation(url, "settings").open(create=True) as store:
            settings = store.conn.execute(  # type: ignore[attr-defined]
                "SELECT name, setting, unit FROM pg_settings WHERE name IN ('maintenance_work_mem', "
                "'max_parallel_maintenance_workers', 'shared_buffers') ORDER BY name"
            ).fetchall()
        print("server:", ", ".join(f"{n} {v}{' x ' + u if u else ''}" for n, v, u in settings))

        texts = QUERIES + [q["query"] for q in json.loads(SAMPLE_QUERIES.read_text())]
        print(
            "\n| chunks | text rows (s) | vectors + HNSW build (s) | HNSW graph (MB) | chunks table, "
            "all (MB) | recall@10, ef_search 400 (vs every window, vs exact first step) | p50 (ms) "
            "| p95 (ms) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        first: PostgresLocation | None = None
        ef_table: dict[int, tuple[float, float]] = {}
        for size in args.chunks or [100_000]:
            where = PostgresLocation(url, f"bench_query_{size}")
            counts = window_counts(size)
            if args.random_vectors:
                windows, queries = random_vectors(int(counts.sum())), random_vectors(200, seed=7)
            else:  # the model's own query vectors, and mixes like the chunks'
                windows = realistic_windows(counts, embedder)
                queries = np.vstack(
                    [embedder.embed_query(t) for t in texts]
                    + [realistic_vectors(100, embedder, seed=9)]
                )
            timings = {"rows": float("nan"), "vectors": float("nan")}
            if not args.reuse:
                with where.open(create=True) as store:
                    build(store, size, embedder, windows, timings)
            scanned, stepped = exact_top(counts, windows, queries)
            del windows
            efs = EF_VALUES if first is None else (EF_SEARCH,)
            found = recall(where, scanned, queries, efs)
            graph_only = recall(where, stepped, queries, efs)
            if first is None:
                first_truth = (stepped, queries)
            ef_table = ef_table or {ef: (found[ef], graph_only[ef]) for ef in efs}
            graph, table = sizes(where)
            p50, p95, _ = in_process(where, embedder, args.runs, False, Options())
            print(
                f"| {size:,} | {timings['rows']:.0f} | {timings['vectors']:.0f} | {graph:.0f} "
                f"| {table:.0f} | {found[EF_SEARCH]:.3f}, {graph_only[EF_SEARCH]:.3f} | {p50:.1f} "
                f"| {p95:.1f} |"
            )
            first = first or where
        assert first is not None
        kind = "random unit vectors" if args.random_vectors else "model-like vectors"
        print(
            f"\n| ef_search | recall@10 vs every window scanned | vs the two steps with an exact "
            f"first step ({kind}, {len(texts) + 100} queries) | in-process hybrid p50 / p95 (ms) |"
        )
        print("|---|---|---|---|")
        for ef, (every_window, two_steps) in ef_table.items():  # a reader's `ef_search` setting
            p50, p95, _ = in_process(replace(first, ef_search=ef), embedder, args.runs, False)
            print(f"| {ef} | {every_window:.3f} | {two_steps:.3f} | {p50:.1f} / {p95:.1f} |")
        quantized(first, *first_truth)

        print("\n| index | p50 (ms) | p95 (ms) | of which query embedding, p50 (ms) |")
        print("|---|---|---|---|")
        filtered = Options(only=note_filter(paths=["n1/"]))
        readers = (
            (False, "PostgreSQL HNSW"),
            (True, "PostgreSQL, mean vectors in memory (a long-lived reader: memsync mcp)"),
        )
        for in_memory, how in readers:
            for options, what in ((Options(), ""), (filtered, ", filtered to 0.5% (--path)")):
                p50, p95, embed = in_process(first, embedder, args.runs, in_memory, options)
                print(
                    f"| {(args.chunks or [100_000])[0]:,} chunks, in-process hybrid, {how}{what} "
                    f"| {p50:.1f} | {p95:.1f} | {embed:.1f} |"
                )
        loaded, kept = memory_load(first, embedder)
        print(
            f"\n(a long-lived reader's first query reads the mean vectors: {loaded:.1f} s, "
            f"{kept:.0f} MB kept in its memory)"
        )
        p50, p95 = whole_process(
            min(args.runs, 20), workdir, args.vault, "--db", url, "--name", args.vault.name
        )
        print(
            f"| {args.vault.name}, whole `memsync query --db postgresql://...` process | {p50 * 1000:.0f} "
            f"| {p95 * 1000:.0f} | - |"
        )
        legs(first, embedder)

        root = make_vault(workdir / "vault", args.notes)
        print("\n| backend | notes | text-only index (s) | notes/s | no-op re-index (s) |")
        print("|---|---|---|---|---|")
        for label, place in (
            ("SQLite", SqliteLocation(workdir / "index.sqlite")),
            ("PostgreSQL", PostgresLocation(url, f"bench_index_{workdir.name[-8:]}")),
        ):
            first_s, noop, notes = indexing(place, root)
            print(f"| {label} | {notes:,} | {first_s:.2f} | {notes / first_s:.0f} | {noop:.3f} |")


if __name__ == "__main__":
    main()
