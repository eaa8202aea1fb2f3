"""`resources/list` walked page by page, and `resources/read`, through a real MCP client over
stdio; prints a Markdown table.

    python -m benchmarks.bench_mcp_resources [--notes 20000] [--runs 3] [--postgres [--db URL]]

A vault of one-chunk notes in 100 folders, indexed keyword-only (`memsync index`, in-process),
served by `memsync mcp`. Each run starts a new server: its first page is timed from the
client's send to the parsed answer, the index opened on the way, and from the server's start
(the process, initialize and that page: the cold start an agent's client sees); then every
further page by its cursor, then reads of notes. With --postgres, the same vault indexed in
PostgreSQL as well (--db's, or a pgserver started for the run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import PaginatedRequestParams

from benchmarks.common import MEMSYNC, keep_option, short_notes, start_pgserver, workspace
from memsync.agent.resources import note_uri
from memsync.config import load_config
from memsync.memory import index

READS = 20  # notes read per run


async def walk(where: list[str]) -> tuple[float, float, list[float], int, list[float]]:
    """One server's pages: (start to first page s, first page s, later pages s, resources
    listed, reads s)."""
    params = StdioServerParameters(
        command=MEMSYNC[0], args=[*MEMSYNC[1:], "mcp", *where], env=dict(os.environ)
    )
    pages: list[float] = []
    listed: list[str] = []
    start = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        cursor = None
        while True:
            started = time.perf_counter()
            page = await session.list_resources(params=PaginatedRequestParams(cursor=cursor))
            pages.append(time.perf_counter() - started)
            if len(pages) == 1:
                cold = time.perf_counter() - start
            listed += [resource.name for resource in page.resources]
            cursor = page.next_cursor
            if cursor is None:
                break
        reads = []
        for path in listed[:: max(len(listed) // READS, 1)][:READS]:
            started = time.perf_counter()
            await session.read_resource(note_uri(path))
            reads.append(time.perf_counter() - started)
    return cold, pages[0], pages[1:], len(listed), reads


def drop_vault(url: str, name: str) -> None:
    """The run's vault gone from a database that outlives it (--db's)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        for table in ("vaults", "writers"):
            conn.execute(f"DELETE FROM memsync.{table} WHERE name = %s", (name,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notes", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL as well")
    parser.add_argument("--db", help="the PostgreSQL URL (default: a pgserver for the run)")
    keep_option(parser)
    args = parser.parse_args()
    with workspace("memsync-mcpres-", args.keep) as workdir, contextlib.ExitStack() as servers:
        vault = short_notes(workdir / "vault", args.notes, 100, lambda i: f"entry {i}")
        stores = {"SQLite": ["--db", str(workdir / "i.sqlite")]}
        if args.postgres:
            url = args.db or servers.enter_context(start_pgserver(workdir / "pg")).get_uri()
            name = f"mcpres{os.getpid()}"
            servers.callback(drop_vault, url, name)
            stores["PostgreSQL"] = ["--db", url, "--name", name]
        print(
            "| index | notes | pages | start to first page (ms) | first page (ms) "
            "| later pages p50 / slowest (ms) | resources/read p50 (ms) |"
        )
        print("|---|---|---|---|---|---|---|")
        for engine, where in stores.items():
            settings = dict(zip(("db", "name"), where[1::2]))
            index(load_config(provider="none", **settings), vault)
            for _ in range(args.runs):
                cold, first, later, listed, reads = anyio.run(walk, where)
                assert listed == args.notes, listed
                rest = "- / -"
                if later:
                    rest = f"{statistics.median(later) * 1000:.1f} / {max(later) * 1000:.1f}"
                print(
                    f"| {engine} | {listed:,} | {len(later) + 1} | {cold * 1000:.0f} "
                    f"| {first * 1000:.0f} "
                    f"| {rest} | {statistics.median(reads) * 1000:.1f} |"
                )


if __name__ == "__main__":
    main()
