"""`memory_search` round trips through a real MCP client over stdio; prints a Markdown table.

    python -m benchmarks.bench_mcp [--chunks 100000] [--runs 100]

The index is bench_query.py's generated one (sample_vault's word frequencies, random unit
vectors, the local model's key), served by `memsync mcp --db`; each call is timed from the
client's send to its parsed answer, JSON-RPC and the query embedding (local model) included. The
server's RSS is read from /proc after the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks.common import (
    MEMSYNC,
    QUERIES,
    build,
    child_pids,
    keep_option,
    p95,
    rss_mb,
    workspace,
)
from memsync.embed.local import LocalEmbedder
from memsync.store.locate import SqliteLocation


async def measure(db: Path, runs: int) -> tuple[list[float], float]:
    params = StdioServerParameters(
        command=MEMSYNC[0], args=[*MEMSYNC[1:], "mcp", "--db", str(db)], env=dict(os.environ)
    )
    timings = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("memory_search", {"query": "warm up"})  # loads model, vectors
        for i in range(runs):
            started = time.perf_counter()
            result = await session.call_tool("memory_search", {"query": QUERIES[i % len(QUERIES)]})
            timings.append(time.perf_counter() - started)
            assert not result.is_error, result.content
        pids = child_pids("mcp")
        rss = rss_mb(pids[0]) if pids else float("nan")
    return timings, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, action="append")
    parser.add_argument("--runs", type=int, default=100)
    keep_option(parser)
    args = parser.parse_args()
    with workspace("memsync-mcpbench-", args.keep) as workdir:
        print("| index | memory_search p50 (ms) | p95 (ms) | server RSS (MB) |")
        print("|---|---|---|---|")
        for size in args.chunks or [100_000]:
            db = workdir / f"m{size}.sqlite"
            with SqliteLocation(db).open(create=True) as store:
                build(store, size, LocalEmbedder())
            timings, rss = anyio.run(measure, db, args.runs)
            print(
                f"| {size:,} chunks, hybrid, over stdio | {statistics.median(timings) * 1000:.1f} "
                f"| {p95(timings) * 1000:.1f} | {rss:.0f} |"
            )


if __name__ == "__main__":
    main()
