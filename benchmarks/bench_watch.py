"""Watcher figures; prints a Markdown table (no timed asserts anywhere).

    python -m benchmarks.bench_watch [--edits 50] [--vector-edits 10] [--idle-seconds 30]
        [--burst 1000] [--idle-notes 10000] [--vault DIR]

On a copy of sample_vault/ (or of --vault):

- edit -> keyword-queryable: append a unique word to a note, poll a second connection (as
  `memsync query` would) every 5 ms until FTS finds it; debounce 300 ms (the default).
- edit -> vector-queryable: the same until that chunk has its vector, local model.
- a burst of 1,000 new notes (--burst): from the first write until all are in the index.
- idle CPU of `memsync watch` on a 10k-note vault (--idle-notes), and its RSS with the local model
  loaded.
- a folder moved out to a hidden folder and back in a loop (--swap-seconds, at most --swaps times),
  each run in a fresh process: the watcher's RSS with watchdog's queue of unread events bounded
  (the default) and unbounded, halfway, at the end of the loop and after it settles.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.common import (
    MEMSYNC,
    SAMPLE_VAULT,
    keep_option,
    make_vault,
    p95,
    rss_mb,
    workspace,
)
from memsync import fts
from memsync.config import load_config
from memsync.embed.local import LocalEmbedder
from memsync.store.locate import SqliteLocation
from memsync.store.protocols import StoreWriter as Store
from memsync.store.sqlite_store import SqliteStore
from memsync.sync.watcher import MAX_BACKLOG, Watcher


def start_watcher(root: Path, db: Path, embedder: object) -> tuple[Watcher, threading.Thread]:
    """A real watcher of `root` on its own thread, its first sync done (debounce 300 ms)."""
    watcher = Watcher(root, SqliteLocation(db), load_config(debounce_ms=300), embedder)  # type: ignore[arg-type]
    thread = threading.Thread(target=watcher.run)
    thread.start()
    watcher.ready.wait(600)
    return watcher, thread


def _found(store: Store, word: str, need_vector: bool) -> bool:
    rows, _ = store.keyword_search(fts.query_terms(word), False, 5)
    if not rows:
        return False
    if not need_vector:
        return True
    chunk = store.chunks([rows[0][0]])
    return bool(chunk) and next(iter(chunk.values())).embedding is not None


def edit_latency(root: Path, db: Path, edits: int, embedder: object) -> list[float]:
    watcher, thread = start_watcher(root, db, embedder)
    timings = []
    try:
        with SqliteStore(db) as reader:
            while embedder is not None and reader.pending_count():
                time.sleep(0.5)  # let the start-up backlog drain first
            for i in range(edits):
                word = f"zqx{i}edit{int(time.time() * 1000) % 100000}"
                note = root / "edits.md"
                with open(note, "a") as handle:
                    handle.write(f"\n{word} appended\n")
                started = time.perf_counter()
                while not _found(reader, word, embedder is not None):
                    time.sleep(0.005)
                    if time.perf_counter() - started > 120:
                        raise RuntimeError("edit never became searchable")
                timings.append(time.perf_counter() - started)
                time.sleep(0.1)
    finally:
        watcher.request_stop()
        thread.join()
    return timings


def burst(root: Path, db: Path, notes: int) -> float:
    watcher, thread = start_watcher(root, db, None)
    try:
        with SqliteStore(db) as reader:
            before = len(reader.file_rows())
            started = time.perf_counter()
            for i in range(notes):
                (root / "burst").mkdir(exist_ok=True)
                (root / "burst" / f"b{i}.md").write_text(f"# Burst {i}\n\nburst note {i}\n")
            while len(reader.file_rows()) < before + notes:
                time.sleep(0.02)
            return time.perf_counter() - started
    finally:
        watcher.request_stop()
        thread.join()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spawn(root: Path, db: Path, provider: str, env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*MEMSYNC, "watch", str(root), "--db", str(db), "--provider", provider],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stderr is not None
    for line in process.stderr:
        if "reconcile (start)" in line:
            break
    return process


def idle_and_rss(workdir: Path, idle_seconds: float, notes: int) -> tuple[float, float, float]:
    env = {**os.environ}
    big = make_vault(workdir / "idle10k", notes)
    db = workdir / "idle.sqlite"
    subprocess.run(
        [*MEMSYNC, "index", str(big), "--db", str(db), "--provider", "none"],
        check=True,
        capture_output=True,
        env=env,
    )
    process = _spawn(big, db, "none", env)
    time.sleep(min(2.0, idle_seconds))  # past the start-up reconcile
    before = _cpu_seconds(process.pid)
    time.sleep(idle_seconds)
    idle = (_cpu_seconds(process.pid) - before) / idle_seconds * 100
    rss_plain = rss_mb(process.pid)
    process.terminate()
    process.wait()
    small = make_vault(workdir / "rss", 20)
    db2 = workdir / "rss.sqlite"
    process = _spawn(small, db2, "local", env)
    loaded(db2)
    rss_model = rss_mb(process.pid)
    process.terminate()
    process.wait()
    return idle, rss_plain, rss_model


def loaded(db: Path) -> None:
    """Returns once the watcher has stored its first vector: its model is loaded and has run."""
    deadline = time.monotonic() + 120
    with SqliteStore(db) as reader:
        while reader.counts()["chunks"] in (0, reader.pending_count()):
            if time.monotonic() > deadline:
                raise RuntimeError("the watcher never embedded a chunk")
            time.sleep(0.1)


def swap_probe(workdir: Path, seconds: float, swaps: int, max_backlog: int) -> dict[str, float]:
    """In this process: a watcher of a vault whose folder `sub` is moved to `.swap/` and back
    (two lone moves for watchdog) until `seconds` or `swaps`; RSS before, halfway, at the end,
    and after a settling pause as long as half the loop."""
    root = make_vault(workdir / "swap", 20)
    (root / "sub").mkdir()
    (root / "sub" / "deep.md").write_text("# Deep\n\nswapped in and out\n")
    (root / ".swap").mkdir()
    location = SqliteLocation(workdir / "swap.sqlite")
    watcher = Watcher(root, location, load_config(), None, max_backlog=max_backlog)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    got: dict[str, float] = {}
    try:
        watcher.ready.wait(600)
        time.sleep(1.0)
        got["before"] = rss_mb(os.getpid())
        done, started = 0, time.monotonic()
        for half in ("half", "end"):
            deadline = started + seconds * (0.5 if half == "half" else 1.0)
            while done < swaps * (0.5 if half == "half" else 1.0) and time.monotonic() < deadline:
                os.rename(root / "sub", root / ".swap" / "sub")
                os.rename(root / ".swap" / "sub", root / "sub")
                done += 1
            got[half], got[f"swaps_{half}"] = rss_mb(os.getpid()), done
        time.sleep(max(seconds / 2, 1.0))
        got["settled"] = rss_mb(os.getpid())
    finally:
        watcher.request_stop()
        thread.join()
    return got


def swap_growth(seconds: float, swaps: int) -> list[str]:
    """Table rows: each bound measured by swap_probe in a process of its own."""
    rows = []
    for what, bound in (("bounded", MAX_BACKLOG), ("unbounded (before)", 1 << 62)):
        probe = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_watch", "--swap-probe", str(bound)]
            + ["--swap-seconds", str(seconds), "--swaps", str(swaps)],
            check=True,
            capture_output=True,
            text=True,
        )
        got = json.loads(probe.stdout.splitlines()[-1])
        late = max(got["swaps_end"] - got["swaps_half"], 1)
        per_swap = (got["end"] - got["half"]) * 1048576 / late
        rows.append(
            f"| RSS of `memsync watch` while a folder is swapped {got['swaps_end']:,.0f} times in "
            f"{seconds:g} s, watchdog's queue {what}: before, halfway, at the end, settled "
            f"(growth per swap in the second half) | {got['before']:.0f} / {got['half']:.0f} / "
            f"{got['end']:.0f} / {got['settled']:.0f} MB ({per_swap:.0f} B) |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--vector-edits", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--burst", type=int, default=1000, help="new notes written at once")
    parser.add_argument("--idle-notes", type=int, default=10_000, help="the idle vault's notes")
    parser.add_argument("--vault", type=Path, default=SAMPLE_VAULT, help="the vault copied")
    parser.add_argument("--swap-seconds", type=float, default=30, help="the folder swap loop")
    parser.add_argument("--swaps", type=int, default=2_000_000, help="at most this many swaps")
    parser.add_argument("--swap-probe", type=int, help=argparse.SUPPRESS)  # the child process
    keep_option(parser)
    args = parser.parse_args()
    if args.swap_probe is not None:
        with workspace("memsync-swap-", False) as workdir:
            print(json.dumps(swap_probe(workdir, args.swap_seconds, args.swaps, args.swap_probe)))
        return
    with workspace("memsync-wbench-", args.keep) as workdir:
        vault = shutil.copytree(args.vault, workdir / "vault")
        (vault / "edits.md").write_text("# Edits\n")
        keyword = edit_latency(vault, workdir / "kw.sqlite", args.edits, None)
        vector = edit_latency(vault, workdir / "vec.sqlite", args.vector_edits, LocalEmbedder())
        burst_s = burst(vault, workdir / "kw.sqlite", args.burst)
        idle, rss_plain, rss_model = idle_and_rss(workdir, args.idle_seconds, args.idle_notes)
        swapping = swap_growth(args.swap_seconds, args.swaps)

    print("| measure | value |")
    print("|---|---|")
    print(
        f"| edit -> keyword-queryable, p50 / p95 over {len(keyword)} edits (debounce 300 ms) | "
        f"{statistics.median(keyword) * 1000:.0f} ms / {p95(keyword) * 1000:.0f} ms |"
    )
    print(
        f"| edit -> vector-queryable (local model), p50 / p95 over {len(vector)} edits | "
        f"{statistics.median(vector) * 1000:.0f} ms / {p95(vector) * 1000:.0f} ms |"
    )
    print(f"| burst of {args.burst:,} new notes, all indexed (text) | {burst_s:.1f} s |")
    print(
        f"| idle CPU of `memsync watch` on a {args.idle_notes + 1:,}-note vault, over "
        f"{args.idle_seconds:.0f} s | {idle:.2f}% |"
    )
    print(
        f"| RSS of `memsync watch`, keyword-only / with the local model loaded | "
        f"{rss_plain:.0f} MB / {rss_model:.0f} MB |"
    )
    print("\n".join(swapping))


if __name__ == "__main__":
    main()
