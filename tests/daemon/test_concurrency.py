"""One `memsync serve VAULT` answering everything at once: this user's relayed commands, each from
its own folder with its own environment, HTTP requests, and its watcher applying edits. Each
command prints what a cold process of it prints, byte for byte, and the HTTP side reads the served
vault only (issue 48: `serve A --db idx.sqlite`, then `query --db idx.sqlite` in B's folder, left
every /api answer reading B's index until a restart)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memsync.web.tokens import Tokens
from tests.conftest import free_port, wait_until, write
from tests.daemon.test_relay import IN_PROCESS, Daemon, _steady

TIMEOUT = 120  # seconds any one process, request or wait may take on a loaded machine
ALPHA = {
    "servers.md": "The alpha server's SSH port is 2222.",
    "runbook.md": "Restart the alpha port.",
}
BRAVO = {"servers.md": "The bravo server's SSH port is 4444.", "bravo.md": "The bravo port list."}
EDITS = ("aardvark", "zebra", "yak", "xerus")  # one word each: the vault's word counts stay
CLIENTS = {
    "cold": [sys.executable, "-c", IN_PROCESS],  # never asks a daemon
    "relayed": [sys.executable, "-m", "memsync"],  # the shell's: asks the daemon of its index
    # a client that leaves the daemon to tell whether the index is its own, as it must where
    # the client cannot (no --db); here, every command
    "daemon decides": [
        sys.executable,
        "-c",
        "from memsync.daemon import endpoint; endpoint.named_file = lambda *_: None; "
        "from memsync.__main__ import main; main()",
    ],
}
Command = tuple[Path, dict[str, str], list[str]]  # folder, environment, arguments


def _memsync(client: str, command: Command) -> tuple[int, bytes, bytes]:
    """A command run by a client of CLIENTS: its exit code, stdout and stderr, clocks steadied."""
    cwd, env, args = command
    done = subprocess.run(
        [*CLIENTS[client], *args], capture_output=True, cwd=cwd, env=env, timeout=TIMEOUT
    )
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.returncode, _steady(done.stdout), _steady(done.stderr)


def _in_threads(work: dict[Any, Callable[[], Any]]) -> dict[Any, Any]:
    """Each of `work` on a thread of its own, all let go at once (a barrier): what each returned.
    An exception in one fails the test, with its name."""
    start = threading.Barrier(len(work), timeout=TIMEOUT)
    results: dict[Any, Any] = {}
    failed: dict[Any, BaseException] = {}

    def run(name: Any, job: Callable[[], Any]) -> None:
        try:
            start.wait()
            results[name] = job()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failed[name] = exc

    threads = [threading.Thread(target=run, args=item) for item in work.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * TIMEOUT)
    assert not [thread for thread in threads if thread.is_alive()]
    assert not failed, failed
    return results


def _two_vaults(tmp_path: Path, env: dict[str, str]) -> dict[str, Command]:
    """A's and B's folders, each with its notes and an index of them named idx.sqlite (B's also
    in a data folder of its own): the commands that read them, each with its folder and
    environment. The same relative --db names A's index in A's folder and B's in B's."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, notes in ((a, ALPHA), (b, BRAVO)):
        for name, line in notes.items():
            write(folder / "notes", name, f"# {name[:-3].title()}\n\n{line}\n")
    write(a / "notes", "edits.md", f"# Edits\n\nNow about the {EDITS[0]}.\n")
    write(tmp_path, "one.toml", "limit = 1\n")
    others_data = env | {"XDG_DATA_HOME": str(tmp_path / "b-data")}
    # status names a query refreshing its index as its writer: B's status has an index to itself
    status_data = env | {"XDG_DATA_HOME": str(tmp_path / "b-status")}
    # a MEMSYNC_HOME of its own moves the endpoint too: no daemon of this test answers there
    others_home = env | {"MEMSYNC_HOME": str(tmp_path / "b-home")}
    indexes = [(a, env, ["--db", "idx.sqlite"]), (b, env, ["--db", "idx.sqlite"])]
    defaults = [(b, others_data, []), (b, status_data, []), (b, others_home, [])]
    for folder, indexed, db in [*indexes, *defaults]:
        index = ["index", "notes", "--provider", "none", *db]
        assert _memsync("cold", (folder, indexed, index))[0] == 0
    return {
        "A's --db in A": (a, env, ["query", "port", "--db", "idx.sqlite", "--mode", "keyword"]),
        "A's --db in B": (b, env, ["get", "servers.md:3", "--db", "../a/idx.sqlite"]),
        "B's --db in B": (b, env, ["query", "port", "--db", "idx.sqlite", "--mode", "keyword"]),
        "B's --db in B, get": (b, env, ["get", "servers.md:3", "--db", "idx.sqlite"]),
        "B's MEMSYNC_DB": (b, env | {"MEMSYNC_DB": "idx.sqlite"}, ["get", "bravo.md"]),
        "B's data folder": (b / "notes", others_data, ["query", "port", "--mode", "keyword"]),
        "B's status": (b / "notes", status_data, ["status", "--json"]),
        "B's MEMSYNC_HOME": (b / "notes", others_home, ["get", "servers.md"]),
        # after the edits (status says which it has not applied yet), on another machine
        "A's status elsewhere": (
            a,
            env | {"MEMSYNC_HOST": "elsewhere"},
            ["status", "--db", "idx.sqlite"],
        ),
        "no vector search": (
            a,
            env | {"MEMSYNC_DISABLE_VEC": "1"},
            ["query", "alpha", "--db", "idx.sqlite", "--json"],
        ),
        "another config": (
            a,
            env | {"MEMSYNC_CONFIG": str(tmp_path / "one.toml")},
            ["query", "port", "--db", "idx.sqlite", "--json", "--mode", "keyword"],
        ),
    }


class Served:
    """`memsync serve notes --db idx.sqlite` started in `folder` (A's), an HTTP client of it,
    and what the test's threads do to it at once."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.vault = folder / "notes"
        token, port = Tokens().add("agent"), free_port()
        listen = ["--listen", f"127.0.0.1:{port}", "--provider", "none"]
        serve = ["serve", "notes", "--db", "idx.sqlite", *listen]
        self.daemon = Daemon(serve, folder.parent / "serve.log", cwd=folder, env=env)
        self.http = httpx2.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=TIMEOUT,
        )
        self.clients_done, self.edits_done = threading.Event(), threading.Event()

    def asking(self, path: str) -> Callable[[], list[Any]]:
        """`path` asked over and over, from the daemon's first relayed command (the HTTP side
        opens its index connections among them) until the last has answered: the answers."""

        def ask() -> list[Any]:
            wait_until(lambda: "relayed " in self.daemon.text(), TIMEOUT, "a relayed command")
            answers = []
            while not answers or not self.clients_done.is_set():
                answer = self.http.get(path)
                assert answer.status_code == 200, answer.text
                answers.append(answer.json())
            return answers

        return ask

    def editing(self) -> None:
        """Edits the watcher applies to the served vault, each until it is found over HTTP."""
        for word in EDITS[1:]:
            write(self.vault, "edits.md", f"# Edits\n\nNow about the {word}.\n")
            wait_until(lambda w=word: self._found(w) == ["edits.md"], TIMEOUT, f"the {word} edit")
        self.edits_done.set()

    def _found(self, word: str) -> list[str]:
        found = self.http.get("/api/search", params={"q": word, "mode": "keyword"}).json()
        return [hit["path"] for hit in found["results"]]

    def close(self) -> None:
        self.http.close()
        self.daemon.stop()


def _relayed(served: Served, commands: dict[str, Command]) -> Callable[[], Any]:
    """Every command by both clients that ask a daemon, all at once (a status once the edits
    are applied: it says which are not); what each printed, by (command, client)."""

    def client(name: str, way: str) -> Callable[[], Any]:
        def ask() -> Any:
            if name == "A's status elsewhere":
                assert served.edits_done.wait(TIMEOUT)
            return _memsync(way, commands[name])

        return ask

    def all_at_once() -> dict[tuple[str, str], Any]:
        try:
            ways = ("relayed", "daemon decides")
            return _in_threads(
                {(name, way): client(name, way) for name in commands for way in ways}
            )
        finally:
            served.clients_done.set()

    return all_at_once


def test_relayed_commands_http_requests_and_the_watcher_at_once_each_answer_for_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every process finds the daemon by XDG_RUNTIME_DIR (MEMSYNC_HOME would move its endpoint),
    # so that a client may have a data folder (XDG_DATA_HOME) of its own and still reach it
    monkeypatch.delenv("MEMSYNC_HOME")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    commands = _two_vaults(tmp_path, env)
    served = Served(tmp_path / "a", env)
    try:
        at_once = _in_threads(
            {
                "relayed": _relayed(served, commands),
                "search": served.asking("/api/search?q=port&mode=keyword"),
                "get": served.asking("/api/get?location=servers.md:3"),
                "status": served.asking("/api/status"),
                "edits": served.editing,
            }
        )
        # the same commands in processes of their own, while the daemon still holds its
        # vault's writer lock (status names it)
        cold = {name: _memsync("cold", command) for name, command in commands.items()}
    finally:
        served.close()
    assert at_once["relayed"] == {(name, way): cold[name] for name, way in at_once["relayed"]}
    assert served.daemon.relayed()  # the daemon answered some (one waiting 2 s declines)
    assert "declined a relayed" not in served.daemon.text()  # none failed in the daemon
    assert b"alpha" in cold["A's --db in B"][1] and b"bravo" in cold["B's --db in B, get"][1]
    assert b"bravo.md" in cold["B's data folder"][1] and b"bravo" in cold["B's MEMSYNC_HOME"][1]
    assert b"memsync serve running" in cold["A's status elsewhere"][1]
    for found in at_once["search"]:
        assert {hit["path"] for hit in found["results"]} == {"servers.md", "runbook.md"}
        assert all("alpha" in hit["snippet"] for hit in found["results"])
    assert {got["text"] for got in at_once["get"]} == {ALPHA["servers.md"]}
    named = {(status["vault"], status["db"]) for status in at_once["status"]}
    assert named == {(str(served.vault), str(tmp_path / "a" / "idx.sqlite"))}
