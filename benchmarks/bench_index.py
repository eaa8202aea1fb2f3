"""Indexing figures on generated vaults; prints a Markdown table (no timed asserts anywhere).

    python -m benchmarks.bench_index --notes 1000 --notes 10000 --notes 20000 [--embed-notes 1000]
        [--long-entries 1000] [--runs 7]

For each vault size: text-only index time; no-op re-index next to a bare walk+stat of the same tree,
in-process and as whole processes (`memsync index` against `python -c walk+stat`, imports included,
their bytecode cached as an installed package's is; the two run in turn --runs times, the median of
each), then the same no-op `memsync index` process answered by a running `memsync watch` of the
vault, against the walk process again;
a one-paragraph edit of a 2,000-line note of 1,000 paragraphs (--long-entries; time, chunks
re-chunked, chunks re-embedded). On the vault of --embed-notes notes the local model embeds everything: pipeline chunks/s next to the bare
model's chunks/s on the very same chunk texts.
"""

from __future__ import annotations

import argparse
import inspect
import os
import signal
import subprocess
import sys
from pathlib import Path

from benchmarks.common import (
    MEMSYNC,
    fresh_home,
    installed_env,
    keep_option,
    make_vault,
    process_seconds,
    timed,
    wait_for_endpoint,
    workspace,
)
from memsync.embed.local import LocalEmbedder
from memsync.store.sqlite_store import SqliteStore
from memsync.sync.embedding import embed_pending
from memsync.sync.syncer import index_vault


def bare_walk_stat(root: Path) -> int:
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.endswith(".md"):
                os.stat(os.path.join(folder, name))
                count += 1
    return count


WALK_PROCESS = f"""
import os, sys
{inspect.getsource(bare_walk_stat).replace("root: Path", "root").replace(" -> int", "")}
bare_walk_stat(sys.argv[1])
"""


def edit_long_note(root: Path, entries: int) -> None:
    """One sentence more in the middle entry of long-log.md."""
    path = root / "long-log.md"
    lines = path.read_text().split("\n")
    middle = 2 + 2 * ((entries - 1) // 2)  # after the heading and a blank line, each entry two
    lines[middle] = lines[middle] + " plus an edited sentence about the garden shed"
    path.write_text("\n".join(lines))


def run(notes: int, embed: bool, workdir: Path, long_entries: int, runs: int) -> dict[str, object]:
    root = make_vault(workdir / f"vault{notes}", notes, long_entries=long_entries)
    db = workdir / f"index{notes}.sqlite"
    row: dict[str, object] = {"notes": notes + 1}
    with SqliteStore(db) as store:
        seconds, report = timed(lambda: index_vault(store, root, 10 << 20, None))
        row["text-only index (s)"] = round(seconds, 2)
        row["chunks"] = report.chunks_written
        embedder = LocalEmbedder() if embed else None
        if embedder is not None:
            texts = [
                f"{c}\n\n{t}" if c else t
                for c, t in store.conn.execute("SELECT context, text FROM chunks ORDER BY id")
            ]
            pipeline_s, _ = timed(lambda: embed_pending(store, embedder))
            size = embedder.batch_size  # the pipeline's own batches: padding cost is the same
            bare_s, _ = timed(
                lambda: [
                    embedder.embed_documents(texts[i : i + size])
                    for i in range(0, len(texts), size)
                ]
            )
            row["pipeline chunks/s"] = round(len(texts) / pipeline_s, 1)
            row["bare model chunks/s"] = round(len(texts) / bare_s, 1)
            row["overhead"] = f"{(pipeline_s / bare_s - 1) * 100:+.1f}%"
        walk_s = min(timed(lambda: bare_walk_stat(root))[0] for _ in range(3))
        noop_s = min(
            timed(lambda: index_vault(store, root, 10 << 20, embedder))[0] for _ in range(3)
        )
        row["no-op re-index (s)"] = round(noop_s, 3)
        row["bare walk+stat (s)"] = round(walk_s, 3)
        row["no-op / walk"] = f"{noop_s / walk_s:.2f}x"
        # what a user waits for: `memsync index` as a process against a bare walk+stat process
        # of the same tree, in a home of their own (where no daemon of the user's answers)
        where = ["--db", str(db), "--provider", "auto" if embedder else "none"]  # as made
        home = fresh_home(workdir / f"home{notes}")
        env = {**installed_env(workdir / "bytecode"), "MEMSYNC_HOME": str(home)}
        index_process = [*MEMSYNC, "index", str(root), *where]
        walk_process = [sys.executable, "-c", WALK_PROCESS, str(root)]
        cli_s, walk_process_s = process_seconds(index_process, walk_process, runs=runs, env=env)
        row["no-op `memsync index` process (s)"] = round(cli_s, 3)
        row["walk+stat process (s)"] = round(walk_process_s, 3)
        row["process ratio"] = f"{cli_s / walk_process_s:.2f}x"
        watch = subprocess.Popen(
            [*MEMSYNC, "watch", str(root), *where, "--log-file", str(workdir / "watch.log")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_endpoint(home, watch)
            relayed_s, walk_beside_s = process_seconds(
                index_process, walk_process, runs=runs, env=env
            )
        finally:
            watch.send_signal(signal.SIGTERM)
            watch.wait()
        row["the same through `memsync watch` (s)"] = round(relayed_s, 3)
        row["through watch / walk"] = f"{relayed_s / walk_beside_s:.2f}x"
        edit_long_note(root, long_entries)
        seconds, report = timed(lambda: index_vault(store, root, 10 << 20, embedder))
        row["edit re-index (s)"] = round(seconds, 3)
        row["chunks re-embedded"] = report.embedded if embedder else f"({report.pending} pending)"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notes", type=int, action="append", default=None)
    parser.add_argument("--embed-notes", type=int, default=1000)
    parser.add_argument(
        "--long-entries", type=int, default=1000, help="the paragraphs of long-log.md"
    )
    parser.add_argument(
        "--runs", type=int, default=7, help="alternating runs of each whole process (the median)"
    )
    keep_option(parser)
    args = parser.parse_args()
    sizes = args.notes or [1000, 10000]
    with workspace("memsync-bench-", args.keep) as workdir:
        rows = [run(n, n == args.embed_notes, workdir, args.long_entries, args.runs) for n in sizes]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "-")) for c in columns) + " |")


if __name__ == "__main__":
    main()
