"""`memsync serve`'s targets over HTTP, from the MCP SDK's streamable HTTP client; prints Markdown
tables, each figure with the machine's load average beside it.

    python -m benchmarks.bench_http [--chunks 100000] [--runs 100] [--clients 8] [--searches 50]
                                    [--sessions 4] [--vault DIR]

A real `memsync serve` process in a MEMSYNC_HOME of the benchmark's own, admitting a token made
there with `memsync token add`, the client sending it as `Authorization: Bearer`:
- memory_search at bench_query.py's generated index (vectors in memory, the local model embedding
  each query), over HTTP and over stdio (`memsync mcp`) in the same run, one call of each in turn,
  so that a busy machine slows both alike;
- one client's searches, then `--clients` clients' at once, each on its own session: errors, p50,
  p95, the slowest call (a starved request) and the throughput of each;
- the RSS of one `serve` whose `--sessions` agents have each searched a few times, against the sum
  of as many `memsync mcp` servers' (no daemon running), on --vault indexed with the local model
  and on the generated index.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from pathlib import Path

import anyio
import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from benchmarks.common import (
    MEMSYNC,
    QUERIES,
    SAMPLE_VAULT,
    build,
    child_pids,
    fresh_home,
    keep_option,
    p95,
    rss_mb,
    workspace,
)
from memsync.embed.local import LocalEmbedder
from memsync.store.locate import SqliteLocation

SEARCHES_BEFORE_RSS = 3  # each session's, so that the model and the vectors are loaded


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


class Served:
    """A `memsync serve` process on a free port of 127.0.0.1, and the token that admits agents."""

    def __init__(self, env: dict[str, str], token: str, where: list[str], log: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.token = token
        command = [*MEMSYNC, "serve", *where, "--listen", f"127.0.0.1:{port}", "--quiet"]
        with open(log, "ab") as logged:
            self.process = subprocess.Popen(command, env=env, stdout=logged, stderr=logged)
        headers = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 300  # `serve VAULT` reconciles the vault first
        while self.process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(f"{self.url}/api/status", headers=headers).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"memsync serve did not answer; see {log}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)


@contextlib.asynccontextmanager
async def over_http(served: Served) -> AsyncIterator[ClientSession]:
    """An initialised MCP session over streamable HTTP, as an agent holding the token opens it."""
    headers = {"Authorization": f"Bearer {served.token}"}
    async with (
        create_mcp_http_client(headers) as http,  # the SDK's timeouts, as an agent's client has
        streamable_http_client(f"{served.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def over_stdio(env: dict[str, str], where: list[str]) -> AsyncIterator[ClientSession]:
    """An initialised MCP session with a `memsync mcp` child of this process."""
    params = StdioServerParameters(command=MEMSYNC[0], args=[*MEMSYNC[1:], "mcp", *where], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def search(session: ClientSession, i: int) -> float:
    """Seconds from sending the i-th query to its parsed answer; a tool error raises."""
    started = time.perf_counter()
    result = await session.call_tool("memory_search", {"query": QUERIES[i % len(QUERIES)]})
    took = time.perf_counter() - started
    if result.is_error:
        raise RuntimeError(str(result.content))
    return took


async def alternating(
    served: Served, env: dict[str, str], db: Path, runs: int
) -> dict[str, list[float]]:
    """The same queries over HTTP and over stdio, one call of each in turn (which goes first
    alternates too), both sessions warmed first."""
    timings: dict[str, list[float]] = {"HTTP": [], "stdio": []}
    async with over_http(served) as http, over_stdio(env, ["--db", str(db)]) as stdio:
        sessions = {"HTTP": http, "stdio": stdio}
        for session in sessions.values():
            await search(session, 0)  # the model, the vectors and the glossary loaded
        for i in range(runs):
            for how in ("HTTP", "stdio") if i % 2 == 0 else ("stdio", "HTTP"):
                timings[how].append(await search(sessions[how], i))
    return timings


async def concurrent(
    served: Served, clients: int, searches: int
) -> tuple[list[list[float]], list[str], float]:
    """`clients` sessions, opened and warmed, then all searching at once: (each client's calls'
    seconds, the failed calls' errors, the seconds from the first call to the last answer)."""
    timings: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []

    async def client(session: ClientSession, n: int) -> None:
        for i in range(searches):
            try:
                timings[n].append(await search(session, n + i))
            except Exception as exc:  # noqa: BLE001 - counted and said: the target is none
                errors.append(repr(exc))

    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(over_http(served)) for _ in range(clients)]
        for session in sessions:
            await search(session, 0)
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for n, session in enumerate(sessions):
                group.start_soon(client, session, n)
        wall = time.perf_counter() - started
    return timings, errors, wall


async def searched_by_all(
    opening: Sequence[Callable[[], contextlib.AbstractAsyncContextManager[ClientSession]]],
    read_rss: Callable[[], float],
) -> float:
    """The RSS `read_rss` reads once every session has searched SEARCHES_BEFORE_RSS times, all
    of them at once, as agents working side by side do."""

    async def searching(session: ClientSession, offset: int) -> None:
        for i in range(SEARCHES_BEFORE_RSS):
            await search(session, offset + i)

    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(open_one()) for open_one in opening]
        async with anyio.create_task_group() as group:
            for n, session in enumerate(sessions):
                group.start_soon(searching, session, n)
        return read_rss()


def stdio_rss() -> float:
    return sum(map(rss_mb, child_pids("mcp")))


def rss_rows(
    env: dict[str, str],
    token: str,
    workdir: Path,
    sessions: int,
    indexes: list[tuple[str, list[str], list[str]]],
) -> None:
    """For each (name, serve's arguments, mcp's arguments): one serve with `sessions` HTTP
    sessions, stopped, then `sessions` stdio servers (no daemon running while they answer)."""
    print(
        "| index | one serve, HTTP sessions (MB) | stdio `memsync mcp` servers, summed (MB) | ratio | load |"
    )
    print("|---|---|---|---|---|")
    for name, serve_where, mcp_where in indexes:
        served = Served(env, token, serve_where, workdir / "serve.log")
        try:
            opening = [partial(over_http, served)] * sessions
            serve_rss = anyio.run(searched_by_all, opening, partial(rss_mb, served.process.pid))
        finally:
            served.stop()
        opening = [partial(over_stdio, env, mcp_where)] * sessions
        mcp_rss = anyio.run(searched_by_all, opening, stdio_rss)
        print(
            f"| {name}, {sessions} sessions | {serve_rss:.0f} | {mcp_rss:.0f} "
            f"| {serve_rss / mcp_rss:.2f}x | {load()} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--searches", type=int, default=50, help="each client's")
    parser.add_argument("--sessions", type=int, default=4, help="agents, for the RSS")
    parser.add_argument("--vault", type=Path, default=SAMPLE_VAULT, help="the RSS's real vault")
    keep_option(parser)
    args = parser.parse_args()
    with workspace("memsync-httpbench-", args.keep) as workdir:
        run(args, workdir)


def run(args: argparse.Namespace, workdir: Path) -> None:
    home = fresh_home(workdir / "home")
    env = {**os.environ, "MEMSYNC_HOME": str(home)}
    token = subprocess.run(
        [*MEMSYNC, "token", "add", "bench"], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    db = workdir / f"h{args.chunks}.sqlite"
    with SqliteLocation(db).open(create=True) as store:
        build(store, args.chunks, LocalEmbedder())
    size = f"{args.chunks:,} chunks"

    served = Served(env, token, ["--db", str(db)], workdir / "serve.log")
    try:
        timings = anyio.run(alternating, served, env, db, args.runs)
        print("| memory_search, hybrid, vectors in memory | p50 (ms) | p95 (ms) | load |")
        print("|---|---|---|---|")
        for how, taken in timings.items():
            print(
                f"| {size}, over {how}, {args.runs} calls alternating "
                f"| {ms(statistics.median(taken))} | {ms(p95(taken))} | {load()} |"
            )
        print()
        print(
            "| clients x searches | errors | p50 (ms) | p95 (ms) | slowest call (ms) "
            "| clients' p50, fastest / slowest (ms) | searches/s | load |"
        )
        print("|---|---|---|---|---|---|---|---|")
        failures = []
        for clients in (1, args.clients):
            each, errors, wall = anyio.run(concurrent, served, clients, args.searches)
            taken = [t for client in each for t in client]
            medians = sorted(statistics.median(client) for client in each if client)
            print(
                f"| {clients} x {args.searches} | {len(errors)} | {ms(statistics.median(taken))} "
                f"| {ms(p95(taken))} | {ms(max(taken))} | {ms(medians[0])} / {ms(medians[-1])} "
                f"| {len(taken) / wall:.1f} | {load()} |"
            )
            failures += errors
        for error in dict.fromkeys(failures):
            print(f"\nfailed: {error}")
    finally:
        served.stop()
    print()
    subprocess.run([*MEMSYNC, "index", str(args.vault)], env=env, check=True, capture_output=True)
    rss_rows(
        env,
        token,
        workdir,
        args.sessions,
        [
            (args.vault.name, [str(args.vault)], ["--vault", str(args.vault)]),
            (size, ["--db", str(db)], ["--db", str(db)]),
        ],
    )


if __name__ == "__main__":
    main()
