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
from conftest import free_port, wait_until, write
from test_relay import IN_PROCESS, Daemon, _steady

from memsync.web.tokens import Tokens

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
    indexes = [(a, env, ["--db", "idx.sqlite"]), (b, env, ["--db", "idx.sqlite"])]
    for folder, indexed, db in [*indexes, (b, others_data, []), (b, status_data, [])]:
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


def test_relayed_commands_http_requests_and_the_watcher_at_once_each_answer_for_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every process finds the daemon by XDG_RUNTIME_DIR (MEMSYNC_HOME would move its endpoint),
    # so that a client may have a data folder (XDG_DATA_HOME) of its own and still reach it
    monkeypatch.delenv("MEMSYNC_HOME")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    commands = _two_vaults(tmp_path, env)
    served = tmp_path / "a" / "notes"
    token, port = Tokens().add("agent"), free_port()
    listen = ["--listen", f"127.0.0.1:{port}", "--provider", "none"]
    serve = ["serve", "notes", "--db", "idx.sqlite", *listen]
    daemon = Daemon(serve, tmp_path / "serve.log", cwd=served.parent, env=env)
    http = httpx2.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT,
    )
    clients_done = threading.Event()

    def relayed() -> dict[tuple[str, str], Any]:
        """Every command by both clients that ask a daemon, all at once."""
        try:
            return _in_threads(
                {
                    (name, client): lambda client=client, command=command: _memsync(client, command)
                    for name, command in commands.items()
                    for client in ("relayed", "daemon decides")
                }
            )
        finally:
            clients_done.set()

    def asking(path: str) -> Callable[[], list[Any]]:
        """`path` asked over and over, from the daemon's first relayed command (the HTTP side
        opens its index connections among them) until the last has answered: the answers."""

        def ask() -> list[Any]:
            wait_until(lambda: "relayed " in daemon.text(), TIMEOUT, "a relayed command")
            answers = []
            while not answers or not clients_done.is_set():
                answer = http.get(path)
                assert answer.status_code == 200, answer.text
                answers.append(answer.json())
            return answers

        return ask

    def edited(word: str) -> Callable[[], bool]:
        def found() -> bool:
            results = http.get("/api/search", params={"q": word, "mode": "keyword"}).json()
            return [hit["path"] for hit in results["results"]] == ["edits.md"]

        return found

    def editing() -> None:
        """Edits the watcher applies to the served vault, each seen over HTTP."""
        for word in EDITS[1:]:
            write(served, "edits.md", f"# Edits\n\nNow about the {word}.\n")
            wait_until(edited(word), TIMEOUT, f"the watcher applying {word}")

    try:
        at_once = _in_threads(
            {
                "relayed": relayed,
                "search": asking("/api/search?q=port&mode=keyword"),
                "get": asking("/api/get?location=servers.md:3"),
                "status": asking("/api/status"),
                "edits": editing,
            }
        )
        # the same commands in processes of their own, while the daemon still holds its
        # vault's writer lock (status names it)
        cold = {name: _memsync("cold", command) for name, command in commands.items()}
    finally:
        http.close()
        daemon.stop()
    assert at_once["relayed"] == {(name, client): cold[name] for name, client in at_once["relayed"]}
    assert ("query", "0") in daemon.relayed()  # the daemon did answer some of them
    assert b"alpha" in cold["A's --db in B"][1] and b"bravo" in cold["B's --db in B, get"][1]
    assert b"bravo.md" in cold["B's data folder"][1]
    for found in at_once["search"]:
        assert {hit["path"] for hit in found["results"]} == {"servers.md", "runbook.md"}
        assert all("alpha" in hit["snippet"] for hit in found["results"])
    assert {got["text"] for got in at_once["get"]} == {ALPHA["servers.md"]}
    named = {(status["vault"], status["db"]) for status in at_once["status"]}
    assert named == {(str(served), str(served.parent / "idx.sqlite"))}
