"""Every benchmark script runs, as `python -m benchmarks.NAME`, at tiny sizes on small synthetic
data (a vault of a few notes, SciFact and LoCoMo in their own formats), and prints its figures:
a layout change that breaks one fails here, not in the next measuring session."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, write

TOPICS = {
    "replication": "postgres replication lag runbook: check the standby and the wal sender",
    "redis": "the staging redis uses port 6380; the vpn key is reset from the admin page",
    "garden": "garden budget for the spring: seeds, soil and a new shed",
    "battery": "battery backup release notes and the kernel latency review",
    "coffee": "coffee with the design team after the incident review meeting",
}


def tiny_vault(root: Path) -> Path:
    for name, text in TOPICS.items():
        write(root, f"notes/{name}.md", f"# {name.title()}\n\n{text}\n")
    write(root, "笔记/端口.md", "# 端口\n\n预发布环境的 redis 端口是 6380。\n")
    return root


def obsidian_help(root: Path) -> Path:
    """Obsidian's help's layout: a folder of linked pages per language."""
    for language in ("en", "de"):
        names = list(TOPICS)
        for k, (name, text) in enumerate(TOPICS.items()):
            link = f"[[{names[(k + 1) % len(names)]}]]"
            write(root, f"{language}/{name}.md", f"# {name.title()}\n\n{text} See {link}.\n")
    return root


def scifact(root: Path) -> Path:
    """BEIR's layout: corpus.jsonl.gz, queries.jsonl, qrels/{train,test}.tsv."""
    docs = [
        {"_id": str(100 + i), "title": name.title(), "text": text, "metadata": {}}
        for i, (name, text) in enumerate(TOPICS.items())
    ]
    root.mkdir()
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as corpus:
        corpus.writelines(json.dumps(doc) + "\n" for doc in docs)
    claims = [(str(i), doc["text"].split(":")[0].split(";")[0]) for i, doc in enumerate(docs)]
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t, "metadata": {}}) + "\n" for q, t in claims)
    )
    (root / "qrels").mkdir()
    for split, picked in (("train", claims[:3]), ("test", claims[3:])):
        rows = [f"{q}\t{100 + int(q)}\t1" for q, _ in picked]
        (root / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n"
        )
    return root


def locomo(root: Path) -> Path:
    """LoCoMo's layout: dev.json.gz (conversations of dated sessions, questions naming their
    evidence turns) and dev-corrections.json.gz (the audit's corrected evidence)."""
    texts = list(TOPICS.values())
    conversation: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for session in (1, 2):
        conversation[f"session_{session}_date_time"] = f"1:56 pm on {session} May, 2023"
        conversation[f"session_{session}"] = [
            {"speaker": ("Ana", "Ben")[turn % 2], "dia_id": f"D{session}:{turn + 1}", "text": text}
            for turn, text in enumerate(texts[session - 1 :: 2])
        ]
    qa = [
        {
            "question": "What port does staging redis use?",
            "answer": "6380",
            "evidence": ["D1:1"],
            "category": 4,
        },
        {
            "question": "What is in the garden budget?",
            "answer": "seeds",
            "evidence": ["D2:1"],
            "category": 1,
        },
        {
            "question": "When was the coffee?",
            "answer": "May",
            "evidence": ["D1:9; D2:2"],
            "category": 2,
        },
    ]
    root.mkdir()
    with gzip.open(root / "dev.json.gz", "wt", encoding="utf-8") as dev:
        json.dump([{"sample_id": "conv-1", "conversation": conversation, "qa": qa}], dev)
    fixes = [{"question_id": "locomo_0_qa0", "correct_evidence": ["D1:2"]}]
    with gzip.open(root / "dev-corrections.json.gz", "wt", encoding="utf-8") as corrections:
        json.dump(fixes, corrections)
    return root


FIGURE = r"\d[\d,]*(\.\d+)?"


def scripts(tmp: Path, pg_url: str) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (its tiny arguments, the patterns of the figures it must print)."""
    vault = str(tiny_vault(tmp / "tiny_vault"))
    f = FIGURE
    return {
        "bench_index": (
            ["--notes", "5", "--embed-notes", "5", "--long-entries", "4", "--runs", "2"],
            [
                rf"\| 6 \| {f} \| \d+ \| {f} \| {f} \| [+-]{f}% \| {f} \| {f} \| {f}x \| "
                rf"{f} \| {f} \| {f}x \| {f} \| {f}x \| {f} \| \d+ \|"
            ],
        ),
        "bench_links": (
            ["--notes", "30", "--runs", "1"],
            [
                rf"\| first keyword-only index, without links / with .* \| {f} s / {f} s "
                rf"\([+-]{f}%\) \|",
                rf"\| `links NOTE` in-process, a note with \d+ backlinks .* \| {f} ms \|",
                r"\| a note moved under `watch` -> its backlinks settled .* \| \d+ ms \|",
            ],
        ),
        "bench_links:hostile": (  # NAME:MODE runs benchmarks.NAME
            ["--hostile", "--megabytes", "0.01", "--served-notes", "2"],
            [
                rf"\| backticks \| {f} \| {f} \| {f} \| {f} \|",
                rf"\| /api/status, median / slowest answer \| {f} ms / {f} ms \|",
            ],
        ),
        "bench_related": (
            [str(obsidian_help(tmp / "help")), "--held-out", "de"]
            + ["--latency-notes", "20", "--runs", "2"],
            [
                rf"\| en \(tuned\) \| \d+ \| {f} \| {f} \| {f} \| {f} \|",
                rf"\| de \(held out\) \| \d+ \| {f} \| {f} \| {f} \| {f} \|",
                rf"\| /api/related, 20 notes \(100 chunks\), 2 calls \| {f} \| {f} \| {f} \| {f} \|",
            ],
        ),
        "bench_query": (
            ["--chunks", "50", "--runs", "2", "--vault", vault],
            [
                rf"\| 50 chunks, in-process hybrid, sqlite-vec \| {f} \| {f} \| {f} \|",
                rf"\| 50 chunks, in-process hybrid, vectors in memory \| {f} \| {f} \| {f} \|",
                r"\| tiny_vault, whole `memsync query` process \| \d+ \| \d+ \| - \|",
            ],
        ),
        "bench_shell": (
            ["--runs", "2", "--vault", vault],
            [
                r"\| through `memsync watch` \| \d+ \| \d+ \| \d+\.\d\dx \|",
                r"\| the first after the daemon's kill -9 \| \d+ \| - \| \d+\.\d\dx \|",
                r"Same stdout through the daemon and alone: 2 of 2\.",
            ],
        ),
        "bench_mcp": (
            ["--chunks", "50", "--runs", "3"],
            [rf"\| 50 chunks, hybrid, over stdio \| {f} \| {f} \| \d+ \|"],
        ),
        "bench_http": (
            ["--chunks", "50", "--runs", "3", "--clients", "2", "--searches", "3"]
            + ["--sessions", "2", "--vault", vault],
            [
                rf"\| 50 chunks, over HTTP, 3 calls alternating \| {f} \| {f} \| {f} \|",
                rf"\| 50 chunks, over stdio, 3 calls alternating \| {f} \| {f} \| {f} \|",
                rf"\| 2 x 3 \| 0 \| {f} \| {f} \| {f} \| {f} / {f} \| {f} \| {f} \|",
                rf"\| tiny_vault, 2 sessions \| \d+ \| \d+ \| {f}x \| {f} \|",
                rf"\| 50 chunks, 2 sessions \| \d+ \| \d+ \| {f}x \| {f} \|",
            ],
        ),
        "bench_embed_requests": (
            ["--notes", "20", "--latency", "0.01", "--batch-size", "8", "--in-flight", "1", "2"],
            [rf"\| 2 \| {f} \| {f} \| \d+% \|"],
        ),
        "bench_bulk": (
            ["--notes", "20", "--runs", "1", "--db", pg_url],
            [
                rf"\| text and vectors \| {f} \| {f} \| {f}x \| {f} \| {f} \|",
                rf"vectors/s \(one per note\): SQLite -?{f}, PostgreSQL -?{f}",
                r"SQLite median \d+ ms, PostgreSQL median \d+ ms \(\d+\.\d+x\)",
            ],
        ),
        "bench_postgres": (
            ["--chunks", "50", "--runs", "2", "--notes", "5", "--random-vectors"]
            + ["--db", pg_url, "--vault", vault],
            [
                rf"\| 50 \| {f} \| {f} \| \d+ \| \d+ \| {f}, {f} \| {f} \| {f} \|",
                rf"\| 400 \| {f} \| {f} \| {f} / {f} \|",
                rf"\| 50 chunks, in-process hybrid, PostgreSQL HNSW \| {f} \| {f} \| {f} \|",
                rf"\| OPS-1432 \| {f} \| - \| {f} \| {f} \|",
                rf"\| PostgreSQL \| 6 \| {f} \| \d+ \| {f} \|",
            ],
        ),
        "bench_watch": (
            ["--edits", "2", "--vector-edits", "1", "--idle-seconds", "0.5", "--burst", "20"]
            + ["--idle-notes", "20", "--swap-seconds", "0.5", "--swaps", "200", "--vault", vault],
            [
                r"\| edit -> keyword-queryable, p50 / p95 over 2 edits .* \| \d+ ms / \d+ ms \|",
                r"\| edit -> vector-queryable .* over 1 edits \| \d+ ms / \d+ ms \|",
                rf"\| burst of 20 new notes, all indexed \(text\) \| {f} s \|",
                rf"\| idle CPU of `memsync watch` on a 21-note vault, over 0 s \| {f}% \|",
                r"\| RSS of `memsync watch`, .* \| \d+ MB / \d+ MB \|",
                r"\| RSS of `memsync watch` while a folder is swapped \d+ times in 0\.5 s, watchdog's "
                rf"queue bounded: .* \| {f} / {f} / {f} / {f} MB \(-?\d+ B\) \|",
                r"\| RSS of .* queue unbounded \(before\): .* MB \(-?\d+ B\) \|",
            ],
        ),
        "eval_retrieval": (
            ["--scifact", str(scifact(tmp / "scifact")), "--workdir", str(tmp / "eval")],
            [
                r"### SciFact train \(3 queries\)",
                r"### SciFact test \(2 queries\)",
                rf"\| RRF \(k=60\) \| {f} \| {f} \| {f} \|",
                rf"\| hybrid 0\.\d/0\.\d \(tuned on train\) \| {f} \| {f} \| {f} \|",
            ],
        ),
        "locomo": (
            ["--data", str(locomo(tmp / "locomo")), "--check-cli", "1"]
            + ["--workdir", str(tmp / "eval")],
            [
                r"\(1 conversations, 2 notes, 3 questions, corrected key\)",
                rf"\| hybrid \| {f} \| {f} \| {f} \| {f} \|",
                rf"\| vector \| {f} \| {f} \| {f} \| {f} \|",
                rf"\| keyword \| {f} \| {f} \|",
            ],
        ),
    }


def test_every_script_runs_and_prints_its_figures(tmp_path: Path, pg_url: str) -> None:
    """All at once (their figures mean nothing at these sizes, and most of their time is
    waiting), each `python -m benchmarks.NAME` from the repository's root."""
    # one thread per model: ten processes share the cores, and OpenMP threads that spin against
    # a busy core take many times the CPU
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    table = scripts(tmp_path, pg_url)
    running = {name: start(name, args, tmp_path, env) for name, (args, _) in table.items()}
    failed = []
    for name, (_, patterns) in table.items():
        code = running[name].wait(timeout=300)
        printed, logged = ((tmp_path / f"{name}.{kind}").read_text() for kind in ("out", "err"))
        missing = [p for p in patterns if not re.search(p, printed)]
        if code or "Traceback" in printed + logged or missing:
            failed.append(f"{name} (exit {code}), figures missing: {missing}\n{printed}{logged}")
    assert not failed, "\n\n".join(failed)
    # each script's temporary folder goes with its run (`--keep` keeps it)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(("memsync-", "tmp"))]


def start(name: str, args: list[str], tmp: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`python -m benchmarks.NAME ARGS` started, its output going to NAME.out and NAME.err."""
    with open(tmp / f"{name}.out", "wb") as out, open(tmp / f"{name}.err", "wb") as err:
        command = [sys.executable, "-m", f"benchmarks.{name.split(':')[0]}", *args]
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)


def test_no_script_touches_sys_path() -> None:
    for script in (ROOT / "benchmarks").glob("*.py"):
        assert "sys.path" not in script.read_text(encoding="utf-8"), script.name
