from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsync.config import data_dir
from memsync.embedders import Embedder
from memsync.search.glossary import cached_path, open_glossary
from memsync.store.locate import Location, PostgresLocation, SqliteLocation
from memsync.vectors import normalise

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_VAULT = ROOT / "sample_vault"
# what an MCP client says first, written by hand where a test speaks the protocol raw
MCP_HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
# a PostgreSQL server of the tester's (read before isolated_env clears MEMSYNC_*); else pgserver
TEST_PG_URL = os.environ.get("MEMSYNC_TEST_PG_URL")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads the real home, config or data folder, or a provider setting of the machine."""
    home = tmp_path_factory.mktemp("home")
    for name in list(os.environ):
        if name.startswith(("MEMSYNC_", "OPENAI_", "OLLAMA_")) or name == "NO_COLOR":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("MEMSYNC_HOME", str(home / "memsync"))
    # the passwords redact() has seen, kept for scrub(): one test's (a one-letter one) would
    # hide those letters in another's messages
    from memsync import redact

    monkeypatch.setattr(redact, "_PASSWORDS", set())
    return home


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real dictionary's glossary, built once for the session (3 s)."""
    folder = tmp_path_factory.mktemp("glossary")
    glossary = open_glossary(folder)
    assert glossary is not None
    glossary.close()
    path = cached_path(folder)
    assert path is not None and path.is_file()
    return path


@pytest.fixture(autouse=True)
def glossary_home(built: Path, isolated_env: Path) -> Path:
    """The session's glossary where this test's memsync looks for it, so that a question across
    scripts does not build it again in every test (test_glossary builds it)."""
    home = data_dir()
    home.mkdir(parents=True, exist_ok=True)
    (home / built.name).symlink_to(built)
    return home


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leaked:
            return
        time.sleep(0.05)
    pytest.fail(f"threads leaked: {leaked}")


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL with pgvector: MEMSYNC_TEST_PG_URL's, else one pgserver starts here."""
    if TEST_PG_URL:
        yield TEST_PG_URL
        return
    with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is not set
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()


def drop_vault(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        if conn.execute("SELECT to_regclass('memsync.vaults')").fetchone()[0]:
            conn.execute("DELETE FROM memsync.vaults WHERE name = %s", (name,))
            conn.execute("DELETE FROM memsync.writers WHERE name = %s", (name,))


@pytest.fixture
def pg_vault(pg_url: str) -> Iterator[tuple[str, str]]:
    """(URL, a fresh vault name) in the test server; the vault is dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield pg_url, name
    drop_vault(pg_url, name)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Location]:
    """Where a contract test keeps its index: each test runs once per backend."""
    if request.param == "sqlite":
        yield SqliteLocation(tmp_path / "index.sqlite")
    else:
        from memsync.store import pg_vectors

        # the graph from the first vector, as a large vault has it (below GRAPH_MIN_VECTORS a
        # vault is scanned exactly: test_postgres covers that)
        request.getfixturevalue("monkeypatch").setattr(pg_vectors, "GRAPH_MIN_VECTORS", 1)
        url, name = request.getfixturevalue("pg_vault")
        yield PostgresLocation(url, name)


class HashEmbedder(Embedder):
    """A tiny deterministic bag-of-words model: fast tests that still count what gets embedded."""

    provider = "test"
    model = "hash-64"

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls: list[str] = []
        self.batch_size = 8

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dims, dtype=np.float32)
        for word in text.lower().split():
            digest = hashlib.sha256(word.encode()).digest()
            vector[digest[0] % self.dims] += 1.0 if digest[1] % 2 else -1.0
        vector[0] += 0.01
        return vector

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.extend(texts)
        return normalise(np.array([self._vector(t) for t in texts]))

    def embed_query(self, text: str) -> np.ndarray:
        return normalise(self._vector(text))


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


def shared_words(query: str, document: str) -> float:
    """A stand-in for a cross-encoder: the share of the query's words the document holds."""
    words = set(re.findall(r"\w+", query.lower()))
    return len(words & set(re.findall(r"\w+", document.lower()))) / (1 + len(words))


class JsonHandler(BaseHTTPRequestHandler):
    """A test server's handler: quiet, and reading a request's JSON body."""

    def log_message(self, *args: object) -> None:
        pass

    def read_json(self) -> Any:
        length = int(self.headers.get("Content-Length", 0))
        return json.loads(self.rfile.read(length) or b"{}")


class LocalServer:
    """A real HTTP server on 127.0.0.1 in a thread of its own; `closing` is set when it closes,
    so that an answer still being written (a delay, a trickle) ends at once."""

    def __init__(self) -> None:
        self.closing = threading.Event()

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        # a short poll: shutdown() waits for the loop to see it (0.5 s by default, every test)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class EmbeddingServer(LocalServer):
    """A real HTTP server on 127.0.0.1 speaking OpenAI's and Ollama's embedding APIs, and the
    common /rerank API (Jina/Cohere's body, or Text Embeddings Inference's).

    `script` is a list of (status, headers) to answer before serving real vectors; `delay` slows
    every answer; `requests` records what arrived.
    """

    def __init__(self, dims: int = 16) -> None:
        super().__init__()  # closing ends a delay at once: teardown never waits for one
        self.dims = dims
        self.script: list[tuple[int, dict[str, str]]] = []
        self.delay = 0.0
        self.in_flight = 0  # requests being answered now, and the most at once
        self.most_in_flight = 0
        self._counting = threading.Lock()
        self.requests: list[dict[str, object]] = []
        self.headers: list[dict[str, str]] = []
        self.down = False
        self.transform: Callable[[list[list[float]]], object] | None = None  # spoil the vectors
        self.relevance = shared_words  # how the /rerank endpoint scores (query, document)
        self._model = HashEmbedder(dims)
        server = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.read_json()
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                with server._counting:
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                try:
                    if server.delay:  # a slow or hung server, until the test ends
                        server.closing.wait(server.delay)
                finally:
                    with server._counting:
                        server.in_flight -= 1
                if server.down:
                    self._send(503, {"error": "down"}, {})
                    return
                if server.script:
                    status, headers = server.script.pop(0)
                    # like servers that echo the request in an error, key included
                    echo = {"auth": self.headers.get("Authorization"), "error": "scripted"}
                    self._send(status, echo, headers)
                    return
                if self.path.endswith("/rerank"):
                    documents = body.get("documents", body.get("texts", []))
                    scores = [server.relevance(body["query"], d) for d in documents]
                    order = sorted(range(len(scores)), key=lambda i: -scores[i])
                    if "texts" in body:  # Text Embeddings Inference
                        self._send(200, [{"index": i, "score": scores[i]} for i in order], {})
                    else:
                        results = [{"index": i, "relevance_score": scores[i]} for i in order]
                        self._send(200, {"results": results[: body.get("top_n")]}, {})
                    return
                texts = body["input"]
                vectors = [server._model._vector(t).tolist() for t in texts]
                if server.transform is not None:
                    vectors = server.transform(vectors)  # type: ignore[assignment]
                if self.path.endswith("/api/embed"):
                    self._send(200, {"model": body["model"], "embeddings": vectors}, {})
                else:
                    data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
                    self._send(200, {"data": data[::-1], "model": body["model"]}, {})

            def _send(self, status: int, payload: object, headers: dict[str, str]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.serve(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def embedding_server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer()
    yield server
    server.close()


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def wait_until(check: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    """Until `check()` holds, asked again every 50 ms: a wait for something another thread or
    process does, bounded by `timeout` seconds (then the test fails, saying `what` it waited for).
    """
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not met in {timeout:g} s: {what or check}"
        time.sleep(0.05)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, for a server started as a process."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def as_nobody(action: Callable[[], object]) -> str:
    """What `action` returns (or raises), run in a forked child as uid and gid 65534: the tests
    run as root in CI, and root may read and write everything."""
    import encodings.utf_8_sig  # noqa: F401 - notes are read with it; the child, as nobody,
    import os  # could not import it from an interpreter installed under /root

    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(reader)
        try:
            os.setgid(65534)
            os.setuid(65534)
            message = str(action())
        except BaseException as exc:  # noqa: BLE001
            message = f"{exc.__class__.__name__}: {exc}"
        os.write(writer, message.encode())
        os._exit(0)
    os.close(writer)
    os.waitpid(pid, 0)
    with os.fdopen(reader, "rb") as handle:
        return handle.read().decode()


@pytest.fixture
def world_readable() -> Iterator[Path]:
    """A folder another user can enter (pytest's own temporary folders are private to root)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="memsync-shared-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def memsync(
    *args: str, host: str = "laptop", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`memsync ARGS` as a real process, on the machine named `host` (MEMSYNC_HOST); no output
    it gives may hold a traceback."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    keep |= {"MEMSYNC_HOST": host, "MEMSYNC_HOME": os.environ["MEMSYNC_HOME"]}
    done = subprocess.run(
        [sys.executable, "-m", "memsync", *args],
        capture_output=True,
        text=True,
        env=keep | (env or {}),
        timeout=120,
    )
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


def cli(
    *args: str, host: str = "laptop", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`memsync ARGS` in this process (click's runner), on the machine named `host`, answered as
    `memsync()` answers: for what needs no process of its own. An exception that would print a
    traceback fails the test."""
    from click.testing import CliRunner

    from memsync.cli.commands import main

    ran = CliRunner().invoke(
        main, list(args), env={"MEMSYNC_HOST": host, **(env or {})}, catch_exceptions=False
    )
    return subprocess.CompletedProcess(["memsync", *args], ran.exit_code, ran.stdout, ran.stderr)


# what each migration added, undone: an index as an older memsync left it
UNDO = {
    11: ["DROP TABLE held_links", "DROP TABLE held_names"],
    10: ["DELETE FROM meta WHERE key = 'chunks_version'"],
    9: ["DROP TABLE links", "DROP TABLE names"],
    8: ["ALTER TABLE chunks DROP COLUMN script"],
    7: ["ALTER TABLE chunks DROP COLUMN windows"],
    6: ["ALTER TABLE chunks DROP COLUMN overlap"],
    4: ["ALTER TABLE files DROP COLUMN text", "ALTER TABLE files DROP COLUMN indexed_at"],
    3: [
        "DROP INDEX idx_files_date",
        "DROP TABLE tags",
        *(f"ALTER TABLE files DROP COLUMN {c}" for c in ("title", "date", "warning")),
    ],
    2: ["ALTER TABLE skipped DROP COLUMN mtime", "ALTER TABLE skipped DROP COLUMN size"],
}


def set_back(db: Path, version: int) -> None:
    """The index as the memsync of schema `version` made it: the later migrations undone."""
    import apsw

    conn = apsw.Connection(str(db))
    [(current,)] = conn.execute("PRAGMA user_version")  # a released index may be older
    for number in range(current, version, -1):
        for statement in UNDO.get(number, []):
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version={version}")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    conn.close()


def older_index(folder: Path, version: int) -> tuple[Path, Path]:
    """(vault, index): two notes indexed keyword-only, the index set back to `version`."""
    from memsync.config import load_config
    from memsync.memory import index

    vault = folder / "vault"
    write(vault, "redis.md", "# Redis\n\nThe redis service listens on port 6380.\n")
    write(vault, "kafka.md", "---\ntags: [ops]\n---\n# Kafka\n\nkafka brokers\n")
    db = folder / "index" / "i.sqlite"
    index(load_config(db=str(db), provider="none"), vault)
    set_back(db, version)
    return vault, db


def agent_vault(root: Path) -> Path:
    """The notes the MCP and HTTP tests ask about."""
    write(root, "MEMORY.md", "# MEMORY\n\n- Coffee: flat white with oat milk.\n")
    write(root, "tech/redis.md", "# Redis\n\nThe staging Redis listens on port 6380.\n")
    write(root, "tech/ssh.md", "# SSH\n\nThe test server's SSH port is 2222.\n")
    write(root, "projects/heron.md", "# Heron\n\nHeron syncs with Postgres 16.\n")
    write(root, "笔记/测试服务器.md", "# 测试服务器\n\n- 测试服务器的SSH端口是2222。\n")
    write(root, ".obsidian/workspace.md", "# hidden\n")
    write(root, "drafts/secret.md", "# draft\n")
    write(root, ".memsyncignore", "drafts/\n")
    write(root, "long.md", "".join(f"line {i}\n" for i in range(1, 1001)))
    write(root, "ops/runbook.md", "# Runbook\n\nRestart the port forwarder. #ops/network\n")
    return root


class VaultIndexer:
    """`memsync index` on a vault through the real CLI, which must succeed: the preamble of a
    test about what comes after. Called with no vault, it indexes agent_vault in
    tmp_path/notes; `notes` (path: text) are written into the vault first; keyword-only unless
    `provider` says otherwise; `db` None is the vault's default index. Returns the vault."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def __call__(
        self,
        vault: Path | None = None,
        *,
        notes: Mapping[str, str] | None = None,
        db: Path | str | None = None,
        provider: str = "none",
        flags: Sequence[str] = (),
        host: str = "laptop",
        env: dict[str, str] | None = None,
    ) -> Path:
        if vault is None:
            vault = agent_vault(self.tmp_path / "notes")
        for rel, text in (notes or {}).items():
            write(vault, rel, text)
        where = ["--db", str(db)] if db is not None else []
        done = cli("index", str(vault), *where, "--provider", provider, *flags, host=host, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return vault


@pytest.fixture
def indexed_vault(tmp_path: Path) -> VaultIndexer:
    return VaultIndexer(tmp_path)


@pytest.fixture
def indexed(indexed_vault: VaultIndexer, tmp_path: Path) -> tuple[Path, Path]:
    """agent_vault indexed keyword-only: (vault, index file)."""
    db = tmp_path / "i.sqlite"
    return indexed_vault(db=db), db
