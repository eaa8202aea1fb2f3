"""A command a daemon runs for this user's shell carries its client's environment and folder as
a value: the daemon's own sides (the HTTP server, the watcher) never see them, a relative --db
means the client's folder's file, and every answer is what the client's own process gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memsync.config import (
    Invocation,
    config_path,
    data_dir,
    load_config,
    on_behalf_of,
    resolved_db,
)
from memsync.daemon import endpoint
from memsync.store.origin import this_host
from memsync.web.tokens import Tokens
from tests.conftest import VaultIndexer, free_port, write
from tests.daemon.test_relay import Daemon, _steady, run


def _vault(index: VaultIndexer, folder: Path, word: str, port: str) -> Path:
    """`folder`/notes, whose notes say `word` and `port`, indexed in `folder`/idx.sqlite."""
    notes = {
        f"{word}.md": f"# {word}\n\nThe {word} server's SSH port is {port}.\n",
        f"{word}-more.md": f"More about {word}: its port is {port} too.\n",
    }
    return index(folder / "notes", notes=notes, db=folder / "idx.sqlite", provider="auto")


def _alike(relayed: tuple[int, bytes, bytes], alone: tuple[int, bytes, bytes]) -> bool:
    return (relayed[0], _steady(relayed[1]), _steady(relayed[2])) == (
        alone[0],
        _steady(alone[1]),
        _steady(alone[2]),
    )


class Http:
    """The served JSON API, asked again and again on a thread of its own while the shell's
    commands run: every answer it gave."""

    def __init__(self, port: int, token: str) -> None:
        self.client = httpx2.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}
        )
        self.answers: list[tuple[str, Any]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._ask)
        self.thread.start()

    def _ask(self) -> None:
        while not self.done.is_set():
            for path in ("/api/search?q=port&mode=keyword", "/api/status", "/api/get"):
                params = {"location": "alpha.md"} if path == "/api/get" else None
                answer = self.client.get(path, params=params)
                self.answers.append((path, answer.json()))

    def stop(self) -> list[tuple[str, Any]]:
        self.done.set()
        self.thread.join()
        self.client.close()
        return self.answers


@pytest.fixture
def serving_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indexed_vault: VaultIndexer) -> Any:
    """`memsync serve notes --db idx.sqlite`, started in A's folder; B's folder has an index of
    the same name. (A, B, the server, the JSON API asked meanwhile)."""
    a, b = tmp_path / "a", tmp_path / "b"
    _vault(indexed_vault, a, "alpha", "2222")
    _vault(indexed_vault, b, "beta", "3333")
    token = Tokens().add("agent")
    port = free_port()
    monkeypatch.chdir(a)  # the server's own folder
    daemon = Daemon(
        ["serve", "notes", "--db", "idx.sqlite", "--listen", f"127.0.0.1:{port}"],
        tmp_path / "serve.log",
    )
    monkeypatch.chdir(tmp_path)
    http = Http(port, token)
    try:
        yield a, b, daemon, http
    finally:
        http.stop()
        daemon.stop()


def _only_alpha(answers: list[tuple[str, Any]], a: Path) -> None:
    """Every answer of the JSON API is A's: its notes, its text, its vault."""
    assert answers
    for path, answer in answers:
        if path.startswith("/api/search"):
            assert answer["results"] and all(
                hit["path"].startswith("alpha") for hit in answer["results"]
            ), answer
        elif path == "/api/get":
            assert "2222" in answer["text"] and "3333" not in answer["text"], answer
        else:
            assert answer["vault"] == str((a / "notes").resolve()), answer


def test_a_relative_db_in_another_folder_is_that_folders_index_and_http_keeps_its_own(
    serving_a: Any,
) -> None:
    """The daemon's endpoint is keyed by its index's absolute path: B's `--db idx.sqlite` is
    B's file (the client passes the daemon over without asking it), while A's is answered by
    the daemon; the JSON API answers from A's index throughout."""
    a, b, daemon, http = serving_a
    for folder, word in ((b, "beta"), (a, "alpha")):
        for args, mark in (
            (["query", "port", "--db", "idx.sqlite", "--mode", "keyword", "--files"], word),
            (["get", f"{word}.md", "--db", "idx.sqlite"], word),
            (["status", "--db", "idx.sqlite", "--json"], str(folder / "notes")),
        ):
            relayed = run(args, folder)
            assert _alike(relayed, run(args, folder, relayed=False)), args
            assert mark.encode() in relayed[1], args
    assert [command for command, _ in daemon.relayed()] == ["query", "get", "status"]  # A's
    _only_alpha(http.stop(), a)


def test_another_index_named_from_the_clients_folder_is_declined_by_the_daemon(
    serving_a: Any, indexed_vault: VaultIndexer
) -> None:
    """A --vault the client cannot match to a daemon by itself: the daemon resolves it from the
    client's folder and declines it, and the client answers from that vault's index."""
    a, b, daemon, http = serving_a
    indexed_vault(b / "notes", provider="auto")  # its default index, beside its idx.sqlite
    args = ["query", "port", "--vault", "../b/notes", "--mode", "keyword", "--json"]
    relayed = run(args, a)
    assert _alike(relayed, run(args, a, relayed=False))
    assert [hit["path"] for hit in json.loads(relayed[1])["results"]][0].startswith("beta")
    assert "relayed query: declined" in daemon.text()
    _only_alpha(http.stop(), a)


def test_commands_with_their_own_settings_and_folders_beside_http_and_the_watcher(
    serving_a: Any,
) -> None:
    """Relayed commands of several clients at once (each its own settings and folder), beside
    the JSON API and the watcher applying an edit: each answer is its own process's."""
    a, b, daemon, http = serving_a
    inside = a / "notes"
    alphas = ["--mode", "keyword", "--files", "--path", "alpha.md", "--path", "alpha-more.md"]
    clients: list[tuple[list[str], Path, dict[str, str]]] = [
        (["query", "port", "--db", "../idx.sqlite", *alphas], inside, {"MEMSYNC_LIMIT": "1"}),
        (["query", "port", "--db", "../idx.sqlite", *alphas], inside, {"MEMSYNC_DISABLE_VEC": "1"}),
        (["query", "port", "--db", "idx.sqlite", "--mode", "keyword"], b, {}),
        (["get", "alpha-more.md", "--db", "idx.sqlite"], a, {"MEMSYNC_HOST": "elsewhere"}),
        (["status", "--db", "../idx.sqlite", "--json"], inside, {"MEMSYNC_LIMIT": "2"}),
    ]
    answers: dict[int, tuple[int, bytes, bytes]] = {}

    def ask(at: int) -> None:
        args, folder, env = clients[at]
        answers[at] = run(args, folder, **env)

    write(inside, "alpha-new.md", "A note written while clients ask: port 2222 as well.\n")
    threads = [threading.Thread(target=ask, args=(at,)) for at in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _only_alpha(http.stop(), a)
    status = json.loads(answers.pop(len(clients) - 1)[1])  # its counts: the watcher's pace
    assert status["vault"] == str(inside.resolve())
    daemon.stop()
    for at, answer in answers.items():
        args, folder, env = clients[at]
        assert _alike(answer, run(args, folder, relayed=False, **env)), args
    assert answers[0][1].count(b"\n") == 1  # the client's MEMSYNC_LIMIT
    assert b"beta" in answers[2][1] and b"alpha" not in answers[2][1]
    assert len(daemon.relayed()) == 4  # all but B's, which its client ran itself


def test_the_shells_client_names_the_file_its_db_means_from_its_own_folder() -> None:
    def named(args: list[str], cwd: str, env: dict[str, str]) -> str | None:
        return endpoint.named_file(args, lambda: cwd, env)

    def gone() -> str:
        raise FileNotFoundError(2, "No such file or directory")

    assert named(["query", "x", "--db", "idx.sqlite"], "/a", {}) == "/a/idx.sqlite"
    assert named(["query", "x", "--db=../b/i.sqlite"], "/a/c", {}) == "/a/b/i.sqlite"
    assert named(["status"], "/a", {"MEMSYNC_DB": "i.sqlite"}) == "/a/i.sqlite"
    assert named(["status", "--db", "/x/i.sqlite"], "/a", {"MEMSYNC_DB": "j"}) == "/x/i.sqlite"
    assert named(["status", "--db", "postgresql://h/d"], "/a", {}) is None
    assert named(["query", "x"], "/a", {}) is None  # the vault around the folder: the daemon's
    assert named(["query", "--", "--db"], "/a", {}) is None
    assert endpoint.named_file(["status", "--db", "/x/i.sqlite"], gone, {}) == "/x/i.sqlite"
    assert endpoint.named_file(["status", "--db", "i.sqlite"], gone, {}) is None


def test_a_command_in_a_deleted_folder_still_reads_an_index_named_in_full(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    """Its own process finds its folder only when a path needs it, as before."""
    db = str(tmp_path / "i.sqlite")
    indexed_vault(
        tmp_path / "notes", notes={"n.md": "# N\n\nThe port is 22.\n"}, db=db, provider="auto"
    )
    gone = tmp_path / "gone"
    gone.mkdir()
    shell = f"cd {gone} && rmdir {gone} && exec {sys.executable} -m memsync"
    done = subprocess.run(
        ["/bin/sh", "-c", f"{shell} query port --db {db} --mode keyword --files"],
        capture_output=True,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"n.md\n", b"")


def test_a_clients_settings_are_its_commands_alone(tmp_path: Path) -> None:
    """On the thread that runs a client's command, its environment and folder decide the data
    folder, the config file, the host and a relative --db; another thread, meanwhile, and the
    process after, see the process's own, which nothing changed."""
    client = Invocation(
        {"HOME": "/home/c", "XDG_DATA_HOME": "data", "MEMSYNC_CONFIG": "~/c.toml"}, tmp_path
    )
    process = dict(os.environ), os.getcwd()
    elsewhere: list[Path] = []
    with on_behalf_of(client):
        other = threading.Thread(target=lambda: elsewhere.append(data_dir()))
        other.start()
        other.join()
        assert data_dir() == tmp_path / "data" / "memsync"
        assert config_path() == Path("/home/c/c.toml")
        with_host = Invocation({**client.env, "MEMSYNC_HOST": "the-clients"}, tmp_path)
        with on_behalf_of(with_host):
            assert this_host() == "the-clients"
        assert resolved_db(load_config(db="idx.sqlite")).db == str(tmp_path / "idx.sqlite")
    assert elsewhere == [data_dir()] == [Path(os.environ["MEMSYNC_HOME"])]
    assert (dict(os.environ), os.getcwd()) == process
    assert this_host() != "the-clients"
