"""Query latency; prints a Markdown table (no timed asserts anywhere).

    python benchmarks/bench_query.py [--chunks 10000 --chunks 100000] [--runs 50]

In-process: hybrid search with the local model embedding each query, on generated indexes. Their
chunk vectors are random unit vectors written straight into the store: the model would need hours
to embed 100k chunks on 2 cores, and neither sqlite-vec's scan nor FTS5 cares what the numbers are.
Whole-process: `memsync query` as a shell user runs it, on an index of sample_vault/ (real vectors).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from memsync import fts  # noqa: E402
from memsync.chunking import chunk_text, embed_inputs  # noqa: E402
from memsync.embedders import LocalEmbedder  # noqa: E402
from memsync.filters import note_filter  # noqa: E402
from memsync.locate import Location, SqliteLocation  # noqa: E402
from memsync.search import Options, search  # noqa: E402
from memsync.store import FileRow, NewChunk  # noqa: E402
from memsync.store import StoreWriter as Store  # noqa: E402
from memsync.vectors import to_blob  # noqa: E402


def vocabulary() -> tuple[list[str], list[int]]:
    """Words with the frequencies they have in sample_vault/: a realistic, Zipf-like mix, so that
    FTS5 sees rare and common terms as it would in notes (a 30-word vocabulary makes every chunk
    match every query)."""
    counts: Counter[str] = Counter()
    for note in (ROOT / "sample_vault").rglob("*.md"):
        counts.update(re.findall(r"[^\W_]+", note.read_text(encoding="utf-8").lower()))
    words = sorted(counts)
    return words, [counts[w] for w in words]


QUERIES = [
    "postgres replication lag runbook",
    "what port does the staging redis use",
    "OPS-1432",
    "garden budget",
    "how do I reset the vpn key",
    "端口",
    "battery backup release",
    "meeting notes about the design review",
    "kubernetes pod keeps restarting",
    "coffee",
]


def windows_per_chunk() -> list[int]:
    """How many vectors each of sample_vault's chunks has (its windows): the generated chunks
    take these counts in turn, so that a search scans as many vectors as real notes give."""
    counts = []
    for note in sorted((ROOT / "sample_vault").rglob("*.md")):
        counts += [
            len(embed_inputs(c.context, c.text, c.whole, c.overlap))
            for c in chunk_text(note.read_text(encoding="utf-8"))
        ]
    return counts


def random_vectors(count: int, seed: int = 1) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def window_counts(chunks: int) -> np.ndarray:
    """How many windows each generated chunk has: sample_vault's chunks' counts, in turn."""
    counts = windows_per_chunk()
    return np.array([counts[k % len(counts)] for k in range(chunks)], dtype=np.int64)


def build(
    store: Store,
    chunks: int,
    embedder: LocalEmbedder,
    windows: np.ndarray | None = None,
    timings: dict[str, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The generated index in `store` (any backend), the vectors of its chunks' windows taken
    in turn from `windows` (default: random unit vectors), added as `memsync index` adds a first
    load's; returns (windows per chunk, the window vectors). `timings` gets the seconds the
    text rows and the vectors took."""
    rng = random.Random(1)
    words, weights = vocabulary()
    counts = window_counts(chunks)
    windows = random_vectors(int(counts.sum())) if windows is None else windows
    starts = np.r_[0, np.cumsum(counts)]
    store.set_model(embedder.key, 384)
    per_note = 5
    started = time.perf_counter()
    for note in range(chunks // per_note):
        new = []
        for j in range(per_note):
            text = " ".join(rng.choices(words, weights, k=60)) + f" OPS-{note}"
            # hashes of their own per size: the shared cache must not give one index's vectors
            # to another's chunks
            chunk_hash = f"{chunks}:{note}-{j}"
            # each window's lines, as an index records them (the text is one line)
            window_lines = " ".join(["0-1"] * int(counts[note * per_note + j]))
            new.append(
                NewChunk(
                    j * 10 + 1,
                    j * 10 + 10,
                    chunk_hash,
                    text,
                    "",
                    fts.index_text(text),
                    window_lines=window_lines,
                )  # fmt: skip
            )
        store.replace_file(FileRow(f"n{note // 100}/note{note}.md", str(note), 1, 1), new)
    text_done = time.perf_counter()
    done = 0
    with store.loading_vectors(chunks):
        while batch := store.pending_chunks(2000):
            items = [
                (i, h, to_blob(windows[starts[done + n] : starts[done + n + 1]]))
                for n, (i, h, *_) in enumerate(batch)
            ]
            store.store_embeddings(embedder.key, items, 384)
            done += len(batch)
    if timings is not None:
        timings["rows"] = text_done - started
        timings["vectors"] = time.perf_counter() - text_done
    return counts, windows


def in_process(
    where: Location,
    embedder: LocalEmbedder,
    runs: int,
    in_memory: bool,
    options: Options = Options(),
) -> tuple[float, float, float]:
    timings, embed_only = [], []
    with where.open(vectors_in_memory=in_memory) as store:
        for warm_up in ("warm up", "端口"):  # the model loaded, the glossary built (once)
            search(store, warm_up, options, embedder)
        for i in range(runs):
            query = QUERIES[i % len(QUERIES)]
            started = time.perf_counter()
            embedder.embed_query(query)
            embed_only.append(time.perf_counter() - started)
            started = time.perf_counter()
            search(store, query, options, embedder)
            timings.append(time.perf_counter() - started)
    q = statistics.quantiles(timings, n=20)
    return statistics.median(timings) * 1000, q[18] * 1000, statistics.median(embed_only) * 1000


def whole_process(runs: int, workdir: Path, *where: str) -> tuple[float, float]:
    """`memsync query` as a process on sample_vault's index; `where`: the flags naming the index
    (default: the vault's own SQLite index)."""
    env = {**os.environ, "MEMSYNC_HOME": str(workdir / "home")}
    subprocess.run(
        [sys.executable, "-m", "memsync", "index", str(ROOT / "sample_vault"), *where],
        env=env,
        check=True,
        capture_output=True,
    )
    # the first question across scripts builds the Chinese-English glossary, once per machine
    # (3.3 s): not what a query costs
    subprocess.run(
        ["memsync", "query", "端口", *(where or ("--vault", str(ROOT / "sample_vault")))],
        env=env,
        check=True,
        capture_output=True,
    )
    timings = []
    for i in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [
                "memsync",
                "query",
                QUERIES[i % len(QUERIES)],
                *(where or ("--vault", str(ROOT / "sample_vault"))),
            ],  # fmt: skip
            env=env,
            check=True,
            capture_output=True,
        )
        timings.append(time.perf_counter() - started)
    return statistics.median(timings), statistics.quantiles(timings, n=20)[18]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, action="append")
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    # one thread, as `memsync query` and `memsync mcp` load the model for queries (two threads
    # embed a query in 9 ms instead of 16 on the calling thread, but none of memsync's callers
    # runs it there: the query is embedded beside the keyword leg)
    embedder = LocalEmbedder(threads=1)
    workdir = Path(tempfile.mkdtemp(prefix="memsync-qbench-"))
    print("| index | p50 (ms) | p95 (ms) | of which query embedding, p50 (ms) |")
    print("|---|---|---|---|")
    for size in args.chunks or [10_000, 100_000]:
        where = SqliteLocation(workdir / f"q{size}.sqlite")
        with where.open(create=True) as store:
            build(store, size, embedder)
        # the filter keeps one folder of 100 notes: 0.5% of the chunks
        filtered = Options(only=note_filter(paths=["n1/"]))
        for in_memory, how in ((False, "sqlite-vec"), (True, "vectors in memory")):
            for options, what in ((Options(), ""), (filtered, ", filtered to 0.5% (--path)")):
                p50, p95, embed = in_process(where, embedder, args.runs, in_memory, options)
                print(
                    f"| {size:,} chunks, in-process hybrid, {how}{what} | {p50:.1f} | {p95:.1f} "
                    f"| {embed:.1f} |"
                )
    p50, p95 = whole_process(min(args.runs, 20), workdir)
    print(
        f"| sample_vault, whole `memsync query` process | {p50 * 1000:.0f} | {p95 * 1000:.0f} | - |"
    )


if __name__ == "__main__":
    main()
