"""The PostgreSQL store's figures next to SQLite's; prints Markdown tables (no timed asserts).

    python benchmarks/bench_postgres.py [--db postgresql://...] [--chunks 100000] [--notes 10000]

Without --db a pgserver (PostgreSQL 16 + pgvector 0.6, from the test extra) is started in a
temporary folder: the server runs on this machine, so the figures carry no network round trip.

- HNSW recall@10 against exact search, for several ef_search values, on the generated index of
  bench_query.py with vectors shaped like real ones: each a mix of two or three vectors the local
  model made of sample_vault's chunks, plus noise (random unit vectors, which have no structure at
  all, are no model's output: HNSW's recall on them is far lower, and is printed too).
- Query latency in-process (hybrid, the local model embedding each query) on that index, whole and
  filtered to 0.5%, where each query's time goes (each leg alone), and `memsync query` as a whole
  process on sample_vault/.
- Text-only indexing and no-op re-index of a generated vault of --notes notes, both backends.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_index import make_vault  # noqa: E402
from bench_query import QUERIES, build, in_process, random_vectors, whole_process  # noqa: E402

from memsync.embedders import LocalEmbedder  # noqa: E402
from memsync.filters import note_filter  # noqa: E402
from memsync.locate import Location, PostgresLocation, SqliteLocation  # noqa: E402
from memsync.search import Options  # noqa: E402
from memsync.sync import index_vault  # noqa: E402

EF_VALUES = (100, 200, 400, 800)
SAMPLE_QUERIES = ROOT / "benchmarks" / "sample_queries.json"


def start_server(workdir: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        return str(pgserver.get_server(workdir / "pg", cleanup_mode="stop").get_uri())


def realistic_vectors(count: int, embedder: LocalEmbedder, seed: int = 1) -> np.ndarray:
    """Mixes of the local model's vectors of sample_vault's chunks, with a little noise: vectors
    that lie where a model's do (a few hundred directions, not all of 384-d space)."""
    from memsync.chunking import chunk_text

    texts = [
        c.text
        for note in sorted((ROOT / "sample_vault").rglob("*.md"))
        for c in chunk_text(note.read_text(encoding="utf-8"))
    ]
    anchors = embedder.embed_documents(texts)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(anchors), size=(count, 3))
    weights = rng.dirichlet([1.0, 1.0, 1.0], size=count).astype(np.float32)
    mixed = np.einsum("nk,nkd->nd", weights, anchors[picks])
    mixed += rng.normal(scale=0.02, size=mixed.shape).astype(np.float32)
    return (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)


def recall(where: PostgresLocation, vectors: np.ndarray, queries: np.ndarray) -> dict[int, float]:
    """Mean share of the exact top 10 that HNSW returns, per ef_search."""
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    found: dict[int, float] = {}
    with where.open() as store:
        ids = [i for i, *_ in store.pending_chunks(len(vectors) + 1, any_chunk=True)]
        for ef in EF_VALUES:
            store.ef_search = ef  # type: ignore[attr-defined]
            shares = []
            for query, truth in zip(queries, exact):
                got = {i for i, _ in store.vector_search(query, 10)}
                shares.append(len(got & {ids[t] for t in truth}) / 10)
            found[ef] = float(np.mean(shares))
    return found


def legs(where: PostgresLocation, embedder: LocalEmbedder) -> None:
    """Where a query's time goes, per query: each leg alone, then the whole hybrid search."""
    from memsync import fts
    from memsync.search import search

    def ms(work) -> float:  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        work()
        return (time.perf_counter() - started) * 1000

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
        started = time.perf_counter()
        report = index_vault(store, root, 10 << 20, None)
        first = time.perf_counter() - started
        noop = []
        for _ in range(3):
            started = time.perf_counter()
            index_vault(store, root, 10 << 20, None)
            noop.append(time.perf_counter() - started)
    return first, min(noop), report.added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="a postgresql:// URL (default: start a pgserver)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="query the generated index already in --db instead of building it again",
    )
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument(
        "--random-vectors", action="store_true", help="random unit vectors, as bench_query.py"
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="memsync-pgbench-"))
    url = args.db or start_server(workdir)
    embedder = LocalEmbedder()

    where = PostgresLocation(url, "bench_query")
    started = time.perf_counter()
    if args.random_vectors:
        vectors, queries = random_vectors(args.chunks), random_vectors(200, seed=7)
    else:  # the model's own query vectors, and mixes like the chunks'
        texts = QUERIES + [q["query"] for q in json.loads(SAMPLE_QUERIES.read_text())]
        vectors = realistic_vectors(args.chunks, embedder)
        queries = np.vstack(
            [embedder.embed_query(t) for t in texts] + [realistic_vectors(100, embedder, seed=9)]
        )
    if not args.reuse:
        with where.open(create=True) as store:
            build(store, args.chunks, embedder, vectors)
        print(
            f"built {args.chunks:,} chunks in PostgreSQL in {time.perf_counter() - started:.0f} s"
        )
    kind = "random unit vectors" if args.random_vectors else "model-like vectors"
    print(f"\n| ef_search | HNSW recall@10 vs exact, {kind}, {len(queries)} queries |")
    print("|---|---|")
    for ef, share in recall(where, vectors, queries).items():
        print(f"| {ef} | {share:.3f} |")

    print("\n| index | p50 (ms) | p95 (ms) | of which query embedding, p50 (ms) |")
    print("|---|---|---|---|")
    filtered = Options(only=note_filter(paths=["n1/"]))
    for options, what in ((Options(), ""), (filtered, ", filtered to 0.5% (--path)")):
        p50, p95, embed = in_process(where, embedder, args.runs, False, options)
        print(
            f"| {args.chunks:,} chunks, in-process hybrid, PostgreSQL HNSW{what} | {p50:.1f} "
            f"| {p95:.1f} | {embed:.1f} |"
        )
    p50, p95 = whole_process(min(args.runs, 20), workdir, "--db", url, "--name", "sample_vault")
    print(
        f"| sample_vault, whole `memsync query --db postgresql://...` process | {p50 * 1000:.0f} "
        f"| {p95 * 1000:.0f} | - |"
    )
    legs(where, embedder)

    root = make_vault(workdir / "vault", args.notes)
    print("\n| backend | notes | text-only index (s) | notes/s | no-op re-index (s) |")
    print("|---|---|---|---|---|")
    for label, place in (
        ("SQLite", SqliteLocation(workdir / "index.sqlite")),
        ("PostgreSQL", PostgresLocation(url, "bench_index")),
    ):
        first, noop, notes = indexing(place, root)
        print(f"| {label} | {notes:,} | {first:.2f} | {notes / first:.0f} | {noop:.3f} |")


if __name__ == "__main__":
    main()
