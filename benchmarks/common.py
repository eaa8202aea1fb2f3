"""What the benchmark scripts share: generated vaults, the generated index of bench_query (text
with sample_vault's word frequencies, vectors written straight into the store), a local
PostgreSQL, a local OpenAI-compatible embedding server, percentiles and timings.

The scripts run as `python -m benchmarks.NAME` from the repository's root.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from memsync import fts
from memsync.chunking import chunk_text, embed_inputs
from memsync.config import data_dir
from memsync.embed.local import LocalEmbedder
from memsync.search.glossary import cached_path
from memsync.search.options import Options
from memsync.search.pipeline import search
from memsync.store.locate import Location
from memsync.store.protocols import FileFacts, FileRow, NewChunk, StoreWriter
from memsync.vectors import to_blob

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_VAULT = ROOT / "sample_vault"
MEMSYNC = [sys.executable, "-m", "memsync"]  # the command line, whatever PATH holds
T = TypeVar("T")

# --- timings and percentiles ------------------------------------------------------------------


def timed(work: Callable[[], T]) -> tuple[float, T]:
    """(seconds `work` took, what it returned)."""
    started = time.perf_counter()
    value = work()
    return time.perf_counter() - started, value


def p95(values: Sequence[float]) -> float:
    """The 95th percentile; a single value is its own."""
    return statistics.quantiles(values, n=20)[18] if len(values) > 1 else values[0]


def installed_env(cache: Path) -> dict[str, str]:
    """This environment with Python's bytecode cached in `cache`, as an installed package's is
    (pip compiles it): with PYTHONDONTWRITEBYTECODE set, every process would compile memsync's
    modules from source again, which no user's process does."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache)}


def process_seconds(
    *commands: list[str], runs: int = 7, env: dict[str, str] | None = None
) -> list[float]:
    """The median wall-clock seconds of each whole process (start-up and imports included), the
    commands run in turn `runs` times: a busy machine's slow moments fall on each of them alike.
    Each runs once before, untimed, so that its bytecode is cached (see installed_env)."""
    seconds: list[list[float]] = [[] for _ in commands]
    for command in commands:
        subprocess.run(command, check=True, capture_output=True, env=env)
    for _ in range(runs):
        for times, command in zip(seconds, commands):
            started = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, env=env)
            times.append(time.perf_counter() - started)
    return [statistics.median(times) for times in seconds]


def wait_for_endpoint(home: Path, daemon: subprocess.Popen[bytes]) -> None:
    """Until the daemon (`memsync watch`) in MEMSYNC_HOME `home` answers this user's shell."""
    deadline = time.monotonic() + 120
    while not list((home / "run").glob("*.json")):
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("memsync watch did not open its endpoint")
        time.sleep(0.1)


def child_pids(subcommand: str) -> list[int]:
    """The pids of this process's children running `memsync SUBCOMMAND`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if parent == os.getpid() and subcommand.encode() in argv:
            pids.append(int(entry.name))
    return pids


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- generated vaults ---------------------------------------------------------------------------

WORDS = (
    "replication server port sync vault note chunk index query model cache token meeting design "
    "garden coffee review deploy incident backup release budget travel kernel latency battery"
).split()


def make_vault(root: Path, notes: int, seed: int = 0, long_entries: int = 1000) -> Path:
    """`notes` notes of one to four random paragraphs in 140 folders, plus long-log.md: a note of
    `long_entries` one-line paragraphs, a blank line after each."""
    rng = random.Random(seed)
    for i in range(notes):
        folder = root / f"area{i % 20}" / f"topic{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        paragraphs = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40)))
            for _ in range(rng.randint(1, 4))
        ]
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(paragraphs) + "\n")
    long_note = ["# Long log", ""]
    for j in range(long_entries):
        long_note += [f"Entry {j}: " + " ".join(rng.choice(WORDS) for _ in range(12)), ""]
    (root / "long-log.md").write_text("\n".join(long_note) + "\n")
    return root


def short_notes(vault: Path, notes: int, folders: int, body: Callable[[int], str]) -> Path:
    """`notes` one-chunk notes `# Note i` in `folders` folders, each a line `body(i)`."""
    for i in range(notes):
        path = vault / f"area{i % folders}" / f"n{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {i}\n\n{body(i)}\n")
    return vault


# --- servers ------------------------------------------------------------------------------------


def keep_option(parser: argparse.ArgumentParser) -> None:
    """`--keep`: leave the run's temporary folder in place (its path is printed) to look inside."""
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary folder (its path is printed)"
    )


@contextlib.contextmanager
def workspace(prefix: str, keep: bool) -> Iterator[Path]:
    """A temporary folder for one run, removed when the run ends unless `keep`; a server started
    in it is stopped first (`start_pgserver` gives one to a `with`, which ends inside this)."""
    if keep:
        folder = Path(tempfile.mkdtemp(prefix=prefix))
        print(f"(keeping {folder})", file=sys.stderr)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as name:
        yield Path(name)


def start_pgserver(folder: Path) -> Any:
    """A PostgreSQL 16 + pgvector server (the `pgserver` wheel of the test extra) in `folder`,
    on this machine: no network round trip in any figure. Stopped when this process ends."""
    with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is not set
        warnings.simplefilter("ignore")
        import pgserver

        return pgserver.get_server(folder, cleanup_mode="stop")  # type: ignore[attr-defined]


def embedding_server(latency: float, dims: int = 64) -> ThreadingHTTPServer:
    """An OpenAI-compatible /v1/embeddings server on 127.0.0.1 that answers every request after
    `latency` seconds with deterministic vectors; `server_url` names its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency)
            data = []
            for i, text in enumerate(body["input"]):
                digest = hashlib.sha256(text.encode()).digest()
                vector = [((digest[j % 32] + j) % 17) - 8.0 for j in range(dims)]
                vector[0] += 0.5
                data.append({"index": i, "embedding": vector})
            raw = json.dumps({"data": data, "model": body["model"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


def server_url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


# --- the generated index (bench_query, bench_mcp, bench_postgres) -------------------------------

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


def vocabulary() -> tuple[list[str], list[int]]:
    """Words with the frequencies they have in sample_vault/: a realistic, Zipf-like mix, so that
    FTS5 sees rare and common terms as it would in notes (a 30-word vocabulary makes every chunk
    match every query)."""
    counts: Counter[str] = Counter()
    for note in SAMPLE_VAULT.rglob("*.md"):
        counts.update(re.findall(r"[^\W_]+", note.read_text(encoding="utf-8").lower()))
    words = sorted(counts)
    return words, [counts[w] for w in words]


def windows_per_chunk() -> list[int]:
    """How many vectors each of sample_vault's chunks has (its windows): the generated chunks
    take these counts in turn, so that a search scans as many vectors as real notes give."""
    counts = []
    for note in sorted(SAMPLE_VAULT.rglob("*.md")):
        counts += [
            len(embed_inputs(c.context, c.text, c.whole, c.overlap))
            for c in chunk_text(note.read_text(encoding="utf-8"))
        ]
    return counts


def random_vectors(count: int, seed: int = 1) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, 384)).astype(np.float32)
    unit: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


def window_counts(chunks: int) -> np.ndarray:
    """How many windows each generated chunk has: sample_vault's chunks' counts, in turn."""
    counts = windows_per_chunk()
    return np.array([counts[k % len(counts)] for k in range(chunks)], dtype=np.int64)


def build(
    store: StoreWriter,
    chunks: int,
    embedder: LocalEmbedder,
    windows: np.ndarray | None = None,
    timings: dict[str, float] | None = None,
    with_text: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The generated index in `store` (any backend), the vectors of its chunks' windows taken
    in turn from `windows` (default: random unit vectors), added as `memsync index` adds a first
    load's; returns (windows per chunk, the window vectors). `timings` gets the seconds the
    text rows and the vectors took; `with_text`: each note's text is kept too, as the index of a
    vault on another machine keeps it."""
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
        # the note's text as its chunks' lines hold it, where asked (what `related` reads)
        lines = [chunk.text if k % 10 == 0 else "" for chunk in new for k in range(10)]
        facts = FileFacts(text="\n".join(lines)) if with_text else FileFacts()
        store.replace_file(FileRow(f"n{note // 100}/note{note}.md", str(note), 1, 1), new, facts)
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
    """(p50, p95 of a hybrid search, p50 of the query's embedding alone), in milliseconds."""
    timings, embed_only = [], []
    with where.open(vectors_in_memory=in_memory) as store:
        for warm_up in ("warm up", "端口"):  # the model loaded, the glossary built (once)
            search(store, warm_up, options, embedder)
        for i in range(runs):
            query = QUERIES[i % len(QUERIES)]
            embed_only.append(timed(lambda: embedder.embed_query(query))[0])  # noqa: B023
            timings.append(timed(lambda: search(store, query, options, embedder))[0])  # noqa: B023
    return (
        statistics.median(timings) * 1000,
        p95(timings) * 1000,
        statistics.median(embed_only) * 1000,
    )


def whole_process(runs: int, workdir: Path, vault: Path, *where: str) -> tuple[float, float]:
    """(p50, p95 seconds) of `memsync query` as a process on `vault`'s index; `where`: the
    flags naming the index (default: the vault's own SQLite index, in a home of its own)."""
    home = fresh_home(workdir / "home")
    env = {**os.environ, "MEMSYNC_HOME": str(home)}
    subprocess.run(
        [*MEMSYNC, "index", str(vault), *where], env=env, check=True, capture_output=True
    )
    asked = where or ("--vault", str(vault))

    def query(text: str) -> None:
        subprocess.run([*MEMSYNC, "query", text, *asked], env=env, check=True, capture_output=True)

    # the first question across scripts opens the Chinese-English glossary (or builds it, once
    # per machine): not what a query costs
    query("端口")
    timings = [timed(lambda: query(QUERIES[i % len(QUERIES)]))[0] for i in range(runs)]  # noqa: B023
    return statistics.median(timings), p95(timings)


def fresh_home(home: Path) -> Path:
    """An empty MEMSYNC_HOME that shares this machine's Chinese-English glossary, when built."""
    home.mkdir(parents=True, exist_ok=True)
    glossary = cached_path(data_dir())
    shared = None if glossary is None else home / glossary.name
    if glossary is not None and glossary.is_file() and shared is not None and not shared.exists():
        shared.symlink_to(glossary.resolve())
    return home
