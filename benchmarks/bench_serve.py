"""`memsync serve` under load: searches over HTTP, one client and several at once; prints a
Markdown table.

    python -m benchmarks.bench_serve [--chunks 100000] [--runs 100] [--clients 1 2 4]

The index is bench_query's generated one (sample_vault's word frequencies, random unit vectors,
the local model's key), served by a real `memsync serve --db` process on a free port with a token
of its own home. Rows: MCP `memory_search` over streamable HTTP (the SDK's client, one session,
each call timed from send to parsed answer; compare bench_mcp's stdio row), `/api/search` from one
client, then N clients at once (threads, each its own connection), their throughput and latency.
Every search is hybrid: the query embedding (local model) included. The server's RSS is read from
/proc after the runs: each index connection holds its own vectors and query model.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import anyio
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from benchmarks.common import MEMSYNC, QUERIES, build, p95, rss_mb
from memsync.embed.local import LocalEmbedder
from memsync.serve.tokens import Tokens
from memsync.store.locate import SqliteLocation


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(db: Path, home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MEMSYNC_HOME": str(home)}
    command = [*MEMSYNC, "serve", "--db", str(db), "--listen", f"127.0.0.1:{port}", "-q"]
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


def wait_until_served(url: str, headers: dict[str, str], server: subprocess.Popen[bytes]) -> None:
    while server.poll() is None:
        try:
            httpx2.get(f"{url}/api/status", headers=headers).raise_for_status()
            httpx2.get(f"{url}/api/search?q=warm+up", headers=headers, timeout=300)
            return
        except httpx2.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"memsync serve exited {server.returncode}")


async def over_mcp(url: str, headers: dict[str, str], runs: int) -> list[float]:
    timings = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=300) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for i in range(runs):
            started = time.perf_counter()
            result = await session.call_tool("memory_search", {"query": QUERIES[i % len(QUERIES)]})
            timings.append(time.perf_counter() - started)
            assert not result.is_error, result.content
    return timings


def over_api(
    url: str, headers: dict[str, str], runs: int, clients: int
) -> tuple[list[float], float]:
    """`runs` searches from each of `clients` threads at once: (every latency, wall seconds)."""
    timings: list[float] = []
    lock = threading.Lock()

    def client(offset: int) -> None:
        with httpx2.Client(headers=headers, timeout=300) as http:
            for i in range(runs):
                query = QUERIES[(i + offset) % len(QUERIES)]
                started = time.perf_counter()
                http.get(f"{url}/api/search", params={"q": query}).raise_for_status()
                with lock:
                    timings.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return timings, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="memsync-servebench-"))
    db, home, port = workdir / "s.sqlite", workdir / "home", free_port()
    with SqliteLocation(db).open(create=True) as store:
        build(store, args.chunks, LocalEmbedder())
    os.environ["MEMSYNC_HOME"] = str(home)  # the token file the server reads
    headers = {"Authorization": f"Bearer {Tokens(home / 'tokens.json').add('bench')}"}
    url = f"http://127.0.0.1:{port}"
    server = start(db, home, port)
    try:
        wait_until_served(url, headers, server)
        print(f"| {args.chunks:,} chunks, hybrid | clients | p50 (ms) | p95 (ms) | searches/s |")
        print("|---|---|---|---|---|")
        timings = anyio.run(over_mcp, url, headers, args.runs)
        rate = len(timings) / sum(timings)
        print(
            f"| MCP memory_search, streamable HTTP | 1 | {statistics.median(timings) * 1000:.1f} "
            f"| {p95(timings) * 1000:.1f} | {rate:.1f} |"
        )
        for clients in args.clients:
            timings, wall = over_api(url, headers, args.runs, clients)
            print(
                f"| /api/search | {clients} | {statistics.median(timings) * 1000:.1f} "
                f"| {p95(timings) * 1000:.1f} | {len(timings) / wall:.1f} |"
            )
        print(f"server RSS after the runs: {rss_mb(server.pid):.0f} MB")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
