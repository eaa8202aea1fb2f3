"""The first index of a generated vault into a fresh SQLite file and a fresh PostgreSQL database
(a non-superuser role owning it, the extension made by the admin), text only and with vectors
from a local OpenAI-compatible server that answers at once; prints a Markdown table.

    python -m benchmarks.bench_bulk [--notes 10000] [--db postgresql://admin-url] [--runs 20] [--graph]

Without --db a pgserver (PostgreSQL 16 + pgvector 0.6, from the test extra) is started in a
temporary folder, on this machine: no network round trip in any figure. Then `memsync query`
as whole processes against both indexes (with vectors), alternating, the query embedded by the
same local server: the medians and their ratio. No asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from benchmarks.common import (
    MEMSYNC,
    embedding_server,
    keep_option,
    server_url,
    short_notes,
    start_pgserver,
    workspace,
)
from memsync.config import load_config
from memsync.memory import index


def role_database(admin_url: str, role: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{role}"')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.execute(f"CREATE ROLE \"{role}\" LOGIN NOSUPERUSER PASSWORD 'pw'")
        admin.execute(f'CREATE DATABASE "{role}" OWNER "{role}"')
    parts = urlsplit(admin_url)
    with psycopg.connect(urlunsplit(parts._replace(path=f"/{role}")), autocommit=True) as admin:
        admin.execute("CREATE EXTENSION vector")
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:pw@{host}", path=f"/{role}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--db", help="an admin's postgresql:// URL (default: start a pgserver)")
    parser.add_argument("--runs", type=int, default=20, help="query processes per index")
    parser.add_argument(
        "--graph",
        action="store_true",
        help="build the HNSW graph whatever the vault's size (memsync builds none below "
        "pg_vectors.GRAPH_MIN_VECTORS vectors): what a larger vault's first load pays",
    )
    keep_option(parser)
    args = parser.parse_args()
    if args.graph:
        from memsync.store import pg_vectors

        pg_vectors.GRAPH_MIN_VECTORS = 1
    with workspace("memsync-bulk-", args.keep) as folder, contextlib.ExitStack() as servers:
        admin = args.db or servers.enter_context(start_pgserver(folder / "pg")).get_uri()
        server = embedding_server(0.0)
        url = server_url(server)
        vault = short_notes(
            folder / "vault",
            args.notes,
            50,
            lambda i: f"short note {i} about topic {i % 13} and item {i % 101}",
        )
        print(f"{args.notes} notes, one chunk each; vectors (64 dims) from a local server")
        print(
            "| run | SQLite (s) | PostgreSQL (s) | PostgreSQL / SQLite | SQLite notes/s "
            "| PostgreSQL notes/s |"
        )
        print("|---|---|---|---|---|---|")
        spent: dict[str, list[float]] = {}
        for label, provider in (("text only", "none"), ("text and vectors", "openai")):
            seconds = []
            for n, db in enumerate(
                (str(folder / f"{provider}.sqlite"), role_database(admin, f"bulk_{provider}"))
            ):
                config = load_config(db=db, provider=provider, openai_base_url=url, batch_size=64)
                if n == 1:
                    config = replace(config, name="bulk")
                started = time.perf_counter()
                report = index(config, vault).report
                seconds.append(time.perf_counter() - started)
                assert report.added == args.notes and report.pending == (
                    args.notes if provider == "none" else 0
                )
            spent[provider] = seconds
            print(
                f"| {label} | {seconds[0]:.1f} | {seconds[1]:.1f} | {seconds[1] / seconds[0]:.1f}x "
                f"| {args.notes / seconds[0]:,.0f} | {args.notes / seconds[1]:,.0f} |"
            )
            indexes = (["--db", str(folder / f"{provider}.sqlite")], ["--db", db, "--name", "bulk"])
        # the vectors' own rate: what adding them cost over the text-only load of the same notes
        rates = [args.notes / (v - t) for t, v in zip(spent["none"], spent["openai"])]
        print(f"\nvectors/s (one per note): SQLite {rates[0]:,.0f}, PostgreSQL {rates[1]:,.0f}")
        sqlite_ms, postgres_ms = query_processes(indexes, url, folder, args.runs)
        print(
            f"\nWhole `memsync query` processes, {args.runs} each, alternating: SQLite median "
            f"{sqlite_ms:.0f} ms, PostgreSQL median {postgres_ms:.0f} ms "
            f"({postgres_ms / sqlite_ms:.2f}x)"
        )
        server.shutdown()


QUERIES = ["topic 7 item 42", "short note about topic 3", "note 1234", "item 99 and topic 12"]


def query_processes(
    indexes: tuple[list[str], list[str]], url: str, folder: Path, runs: int
) -> tuple[float, float]:
    """Median milliseconds of `memsync query` against each index, the two taking turns."""
    env = {**os.environ, "OPENAI_BASE_URL": url, "MEMSYNC_HOME": str(folder / "home")}
    timings: tuple[list[float], list[float]] = ([], [])
    for run in range(runs):
        for where, spent in zip(indexes, timings):
            started = time.perf_counter()
            subprocess.run(
                [*MEMSYNC, "query", QUERIES[run % len(QUERIES)], *where],
                env=env, check=True, capture_output=True,
            )  # fmt: skip
            spent.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings[0]), statistics.median(timings[1])


if __name__ == "__main__":
    main()
