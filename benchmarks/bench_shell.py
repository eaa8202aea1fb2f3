"""The shell through a warm daemon; prints a Markdown table (no timed asserts anywhere).

    python -m benchmarks.bench_shell [--runs 30] [--vault DIR]

Whole `memsync query` processes on the vault's index (sample_vault/ by default, the default
local model), alternating in one run: one through a running `memsync watch`, one in a process of
its own (a home with no daemon, the same index named with --db); then the daemon is killed with
SIGKILL and the next query, which finds its endpoint dead, is timed against the cold ones.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
from pathlib import Path

from benchmarks.common import (
    MEMSYNC,
    QUERIES,
    SAMPLE_VAULT,
    fresh_home,
    keep_option,
    p95,
    timed,
    wait_for_endpoint,
    workspace,
)
from memsync.config import default_db_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--vault", type=Path, default=SAMPLE_VAULT)
    keep_option(parser)
    args = parser.parse_args()
    with workspace("memsync-bench-shell-", args.keep) as work:
        print(shell_table(work, args.vault.resolve(), args.runs))


def shell_table(work: Path, vault: Path, runs: int) -> str:
    home, cold_home = fresh_home(work / "home"), fresh_home(work / "cold")
    warm_env = {**os.environ, "MEMSYNC_HOME": str(home)}
    cold_env = {**os.environ, "MEMSYNC_HOME": str(cold_home)}
    subprocess.run([*MEMSYNC, "index", str(vault)], env=warm_env, check=True, capture_output=True)
    os.environ["MEMSYNC_HOME"] = str(home)
    db = str(default_db_path(vault))
    daemon = subprocess.Popen(
        [*MEMSYNC, "watch", str(vault), "--log-file", str(work / "watch.log")],
        env=warm_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_endpoint(home, daemon)

        def query(text: str, env: dict[str, str]) -> bytes:
            done = subprocess.run(
                [*MEMSYNC, "query", text, "--db", db], env=env, check=True, capture_output=True
            )
            return done.stdout

        for env in (warm_env, cold_env):  # the model loaded and the glossary opened once
            query("端口", env)
        warm, cold, same = [], [], 0
        for i in range(runs):
            text = QUERIES[i % len(QUERIES)]
            seconds, relayed = timed(lambda: query(text, warm_env))  # noqa: B023
            warm.append(seconds)
            seconds, alone = timed(lambda: query(text, cold_env))  # noqa: B023
            cold.append(seconds)
            same += relayed == alone
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        after_kill, _ = timed(lambda: query(QUERIES[0], warm_env))
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    ms = [statistics.median(cold) * 1000, statistics.median(warm) * 1000]
    rows = [
        f"| `memsync query` on {vault.name}, {runs} runs each | p50 ms | p95 ms | x cold |",
        "|---|---:|---:|---:|",
        f"| in a process of its own | {ms[0]:.0f} | {p95(cold) * 1000:.0f} | 1.00x |",
        f"| through `memsync watch` | {ms[1]:.0f} | {p95(warm) * 1000:.0f} | "
        f"{ms[1] / ms[0]:.2f}x |",
        f"| the first after the daemon's kill -9 | {after_kill * 1000:.0f} | - | "
        f"{after_kill * 1000 / ms[0]:.2f}x |",
    ]
    return "\n".join(rows) + f"\n\nSame stdout through the daemon and alone: {same} of {runs}."


if __name__ == "__main__":
    main()
