"""Query latency; prints a Markdown table (no timed asserts anywhere).

    python -m benchmarks.bench_query [--chunks 10000 --chunks 100000] [--runs 50] [--vault DIR]

In-process: hybrid search with the local model embedding each query, on generated indexes. Their
chunk vectors are random unit vectors written straight into the store: the model would need hours
to embed 100k chunks on 2 cores, and neither sqlite-vec's scan nor FTS5 cares what the numbers are.
Whole-process: `memsync query` as a shell user runs it, on an index of sample_vault/ (real
vectors), or of the --vault given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common import (
    SAMPLE_VAULT,
    build,
    in_process,
    keep_option,
    whole_process,
    workspace,
)
from memsync.embed.local import LocalEmbedder
from memsync.filters import note_filter
from memsync.search.options import Options
from memsync.store.locate import SqliteLocation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, action="append")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--vault", type=Path, default=SAMPLE_VAULT, help="the process's vault")
    keep_option(parser)
    args = parser.parse_args()
    # one thread, as `memsync query` and `memsync mcp` load the model for queries (two threads
    # embed a query in 9 ms instead of 16 on the calling thread, but none of memsync's callers
    # runs it there: the query is embedded beside the keyword leg)
    embedder = LocalEmbedder(threads=1)
    with workspace("memsync-qbench-", args.keep) as workdir:
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
        p50, p95 = whole_process(min(args.runs, 20), workdir, args.vault)
        print(
            f"| {args.vault.name}, whole `memsync query` process | {p50 * 1000:.0f} | {p95 * 1000:.0f} | - |"
        )


if __name__ == "__main__":
    main()
