"""`memsync watch` and `memsync serve` (of a vault it watches, or of a shared PostgreSQL vault)
answer this user's query, get, status and mcp through a local endpoint, and index by the watcher:
what the shell prints through it is what its own process prints, byte for byte; a daemon that is
gone, stale or another user's is passed over."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from memsync.config import current
from memsync.daemon import endpoint
from memsync.daemon.relay import Relay
from memsync.store.locate import SqliteLocation
from memsync.web.prefix import page_prefix
from memsync.web.tokens import Tokens
from tests.conftest import (
    MCP_HELLO,
    VaultIndexer,
    as_nobody,
    drop_vault,
    free_port,
    wait_until,
    write,
)

IN_PROCESS = (
    "import sys; from memsync.cli.commands import main; main(prog_name='python -m memsync')"
)


def _env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    return keep | {"MEMSYNC_HOME": os.environ["MEMSYNC_HOME"]} | extra


def run(args: list[str], cwd: Path, relayed: bool = True, **env: str) -> tuple[int, bytes, bytes]:
    """`python -m memsync ARGS` (relayed where a daemon answers), or the CLI in its own process
    however many daemons run."""
    command = [sys.executable, "-m", "memsync"] if relayed else [sys.executable, "-c", IN_PROCESS]
    done = subprocess.run([*command, *args], capture_output=True, cwd=cwd, env=_env(**env))
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.returncode, done.stdout, done.stderr


def on_a_terminal(
    args: list[str], cwd: Path, relayed: bool = True, *, stderr_too: bool = False, code: int = 0
) -> bytes:
    """What `memsync ARGS` shows on a terminal (stdout, and with `stderr_too` stderr, a
    pseudo-terminal), once it exits with `code`."""
    import pty

    command = [sys.executable, "-m", "memsync"] if relayed else [sys.executable, "-c", IN_PROCESS]
    leader, follower = pty.openpty()
    stderr = follower if stderr_too else subprocess.DEVNULL
    process = subprocess.Popen(
        [*command, *args], stdout=follower, stderr=stderr, cwd=cwd, env=_env()
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert process.wait() == code
    return shown


HERE = socket.gethostname()  # where the daemons and the shell's commands below run


def _notes(root: Path) -> Path:
    write(root, "servers.md", "# Servers\n\nThe test server's SSH port is 2222, not 22.\n")
    write(root, "daily/2026-11-10.md", "---\ntags: [incident]\n---\nOPS-1432 postmortem.\n")
    write(root, "笔记/测试服务器.md", "# 测试服务器\n\n测试服务器的SSH端口是2222。\n")
    write(root, "markup.md", "Escapes \x1b[31m and <b>tags</b> shown as text.\n")
    return root


@pytest.fixture
def vault(tmp_path: Path, indexed_vault: VaultIndexer) -> Path:
    # as `memsync index` in a shell of this machine would index it, with the default provider
    return indexed_vault(_notes(tmp_path / "notes"), provider="auto", host=HERE)


ANSWERING = "answering this user's memsync commands"


class Daemon:
    """`memsync COMMAND -v --log-file LOG` (watch, serve), once its log says `until`; in the
    folder `cwd` with the environment `env` where given, else the test's."""

    def __init__(
        self,
        command: list[str],
        log: Path,
        until: str = ANSWERING,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memsync", *command, "-v", "--log-file", str(log)],
            cwd=cwd,
            env=_env() if env is None else env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        try:
            while until not in self.text():
                assert time.monotonic() < deadline and self.process.poll() is None, self.text()
                time.sleep(0.05)
        except AssertionError:  # no fixture stops it then: a server would outlive the tests
            self.process.kill()
            self.process.wait()
            raise

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def relayed(self) -> list[str]:
        return re.findall(r"relayed (\w+): exit (\d+)", self.text())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


@pytest.fixture
def daemon(vault: Path, tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(["watch", str(vault)], tmp_path / "watch.log")
    yield running
    running.stop()


def _steady(output: bytes) -> bytes:
    """status's clock readings (ages, uptime) as placeholders: two runs a second apart differ."""
    text = re.sub(rb"\d+(\.\d+)?(s|m|h) ago|up \d+\w|(_age_s|_s)\": [\d.]+", b"#", output)
    return re.sub(rb"\"(last_sync|started)\": [\d.]+", b"#", text)


COMMANDS = [
    ["query", "ssh port of the test server"],
    ["query", "OPS-1432", "-n", "2", "--json"],
    ["query", "测试服务器", "--explain", "--path", "笔记/"],
    ["query", "port", "--files", "--mode", "keyword"],
    ["query", "nothing-like-this-anywhere", "--mode", "keyword"],
    ["query", "x", "--since", "garbage"],  # a usage error: exit 2
    ["get", "servers.md:3"],
    ["get", "markup.md", "--raw"],
    ["get", "missing.md"],  # exit 1
    ["related", "servers.md", "--json"],
    ["related", "[[servers]]", "-n", "1"],
    ["related", "missing.md"],  # exit 1
    ["status"],
    ["status", "--json"],
]


def _each_command_relayed_as_alone(daemon: Daemon, vault: Path, flags: list[str]) -> None:
    """Every command of COMMANDS (with `flags`) prints through `daemon` what it prints in its
    own process, and each was relayed."""
    for args in COMMANDS:
        command = [*args, *flags]
        relayed, alone = run(command, vault), run(command, vault, relayed=False)
        assert (relayed[0], _steady(relayed[1]), _steady(relayed[2])) == (
            alone[0],
            _steady(alone[1]),
            _steady(alone[2]),
        ), args
    answered = daemon.relayed()
    assert len(answered) == len(COMMANDS)
    assert ("query", "2") in answered and ("get", "1") in answered


def test_what_the_shell_prints_through_the_daemon_is_what_its_own_process_prints(
    daemon: Daemon, vault: Path
) -> None:
    _each_command_relayed_as_alone(daemon, vault, [])


def test_the_clients_own_settings_and_folder_decide_the_answer(
    daemon: Daemon, vault: Path, tmp_path: Path
) -> None:
    limited = run(["query", "port", "--mode", "keyword"], vault, MEMSYNC_LIMIT="1")
    assert limited == run(["query", "port", "--mode", "keyword"], vault, False, MEMSYNC_LIMIT="1")
    assert limited[1].count(b"\n1. ") + limited[1].startswith(b"1. ") == 1
    assert b"2. " not in limited[1]
    colored = on_a_terminal(["query", "port", "--mode", "keyword"], vault)
    assert b"\x1b[" in colored  # colour and links, as for a person at a terminal
    assert colored == on_a_terminal(["query", "port", "--mode", "keyword"], vault, relayed=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()  # no vault around this folder: the daemon's index is the only one indexed
    from_elsewhere = run(["get", "servers.md:3"], elsewhere)
    assert from_elsewhere == run(["get", "servers.md:3"], elsewhere, relayed=False)
    assert len(daemon.relayed()) == 3


def test_a_command_for_another_index_runs_in_its_own_process(
    daemon: Daemon, vault: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    write(other, "a.md", "Another vault's note about ports.\n")
    assert run(["index", str(other), "--provider", "none"], other)[0] == 0
    code, out, _ = run(["query", "ports", "--vault", str(other)], vault)
    assert code == 0 and b"a.md" in out
    assert daemon.relayed() == []  # declined: the client answered it itself


@pytest.mark.parametrize(
    ("args", "printed"), [(["query", "ssh port"], b"servers.md"), (["index", "."], b" 0 new")]
)
def test_the_client_imports_neither_click_nor_numpy_nor_the_store(
    daemon: Daemon, vault: Path, args: list[str], printed: bytes
) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memsync", *args],
        capture_output=True,
        cwd=vault,
        env=_env(),
    )
    imported = {line.split("|")[-1].strip() for line in done.stderr.decode().splitlines()}
    assert done.returncode == 0 and printed in done.stdout
    assert daemon.relayed() == [(args[0], "0")]
    assert "memsync.daemon.endpoint" in imported
    assert not imported & {
        "click",
        "numpy",
        "apsw",
        "memsync.cli.commands",
        "memsync.memory",
        "httpx",
    }


def _untimed(outcome: tuple[int, bytes, bytes]) -> tuple[int, bytes, bytes]:
    """An index's exit code, stdout and stderr, its seconds as a placeholder: two runs differ."""
    code, out, err = outcome
    return code, re.sub(rb" in \d+\.\ds: |\"seconds\": [\d.]+", b"#", out), err


def test_an_index_through_the_watcher_prints_what_its_own_process_prints(
    daemon: Daemon, vault: Path
) -> None:
    commands = [["index", str(vault)], ["index", str(vault), "--json"]]
    relayed = [run(args, vault) for args in commands]
    assert daemon.relayed() == [("index", "0"), ("index", "0")]
    assert "reconcile (memsync index)" in daemon.text()
    daemon.stop()
    alone = [run(args, vault, relayed=False) for args in commands]
    assert [_untimed(outcome) for outcome in relayed] == [_untimed(outcome) for outcome in alone]
    assert b" 0 new, " in relayed[0][1] and b" 4 unchanged." in relayed[0][1]


def test_a_note_the_watcher_has_not_applied_yet_is_reported_as_its_own_process_would(
    vault: Path, tmp_path: Path
) -> None:
    daemon = Daemon(["watch", str(vault), "--debounce", "10000"], tmp_path / "watch.log")
    try:
        write(vault, "later.md", "# Later\n\nWritten while the watcher waits for quiet.\n")
        relayed = run(["index", str(vault)], vault)  # its event waits ten seconds of quiet
        assert daemon.relayed() == [("index", "0")]
    finally:
        daemon.stop()
    assert daemon.process.returncode == 0
    (vault / "later.md").unlink()
    assert b" 1 removed, " in run(["index", str(vault)], vault, relayed=False)[1]
    # a note as new: the vector of a text indexed before is in the cache, and not embedded now
    write(vault, "later.md", "# Later\n\nWritten with no watcher running at all.\n")
    assert _untimed(relayed) == _untimed(run(["index", str(vault)], vault, relayed=False))
    assert b" 1 new, " in relayed[1] and b"Chunks written: 1; embedded now: 1 with " in relayed[1]


def test_an_index_the_watcher_cannot_honour_finds_the_index_locked_and_the_watcher_goes_on(
    daemon: Daemon, vault: Path
) -> None:
    locked = f"is being written by memsync watch (pid {daemon.process.pid}".encode()
    code, out, err = run(["index", str(vault), "--provider", "none"], vault)
    assert (code, out) == (1, b"") and err.startswith(b"memsync: error: index ") and locked in err
    shown = on_a_terminal(["index", str(vault)], vault, stderr_too=True, code=1)
    assert locked in shown and b"Traceback" not in shown  # progress bars cannot be relayed
    assert daemon.relayed() == [] and daemon.text().count("relayed index: declined") == 2
    write(vault, "after.md", "The watcher still applies what changes: zanzibar.\n")
    wait_until(lambda: b"after.md" in run(["query", "zanzibar", "--mode", "keyword"], vault)[1])
    assert _untimed(run(["index", str(vault)], vault))[0] == 0
    assert daemon.relayed()[-1] == ("index", "0") and daemon.process.poll() is None


def test_a_killed_daemon_is_passed_over_and_its_entry_removed(daemon: Daemon, vault: Path) -> None:
    alive = run(["query", "ssh port"], vault)
    daemon.process.kill()
    daemon.process.wait()
    folder = Path(endpoint.run_dir())
    assert list(folder.glob("*.sock")) and list(folder.glob("*.json"))  # left behind by kill -9
    after = run(["query", "ssh port"], vault)
    assert after == alive
    assert list(folder.glob("*.json")) == []


def test_the_endpoint_is_this_users_alone(daemon: Daemon, vault: Path) -> None:
    folder = Path(endpoint.run_dir())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (entry,) = folder.glob("*.json")
    (sock,) = folder.glob("*.sock")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600

    def connect() -> str:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(sock))
        return "connected"

    assert "PermissionError" in as_nobody(connect)
    assert json.loads(entry.read_text())["pid"] == daemon.process.pid


def test_an_agents_stdio_server_is_relayed_and_answers_as_its_own_would(
    daemon: Daemon, vault: Path, tmp_path: Path
) -> None:
    async def answers(command: list[str]) -> list[Any]:
        params = StdioServerParameters(command=sys.executable, args=command, env=_env(), cwd=vault)
        with open(tmp_path / "relayed.err", "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write_),
                ClientSession(read, write_) as session,
            ):
                await session.initialize()
                tools = sorted(tool.name for tool in (await session.list_tools()).tools)
                found = await session.call_tool("memory_search", {"query": "ssh port"})
                lines = await session.call_tool("memory_get", {"path": "servers.md"})
                return [tools, found.structured_content, lines.structured_content]

    relayed = anyio.run(answers, ["-m", "memsync", "mcp"])
    logged = (tmp_path / "relayed.err").read_text()
    assert "serving MCP on stdio" in logged and '"serving"' not in logged  # the relay's own talk
    alone = anyio.run(answers, ["-c", IN_PROCESS, "mcp"])
    assert relayed == alone and "memory_search" in relayed[0]
    assert ("mcp", "0") in daemon.relayed()


def test_an_agents_relayed_session_ended_by_a_signal_exits_0_as_its_own_would(
    daemon: Daemon, vault: Path
) -> None:
    """SIGINT or SIGTERM to a relayed `memsync mcp`: the session ends and it exits 0, as
    `memsync mcp` in its own process does; no traceback, no death by the signal."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        client = subprocess.Popen(
            [sys.executable, "-m", "memsync", "mcp"],
            cwd=vault,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write(json.dumps(MCP_HELLO).encode() + b"\n")
        client.stdin.flush()
        assert json.loads(client.stdout.readline())["id"] == 1  # served: the session is on
        client.send_signal(signum)
        _, err = client.communicate(timeout=60)
        assert client.returncode == 0 and b"Traceback" not in err, err
    # each session ended; the daemon goes on
    wait_until(lambda: daemon.relayed().count(("mcp", "0")) == 2, 60, "both sessions ended")


def test_an_agents_session_whose_daemon_stops_ends_with_one_line_and_exit_1(
    daemon: Daemon, vault: Path, tmp_path: Path
) -> None:
    """The daemon stopped mid-session: the relayed `memsync mcp` says so in one line and exits
    1; it used to abort at shutdown (a thread blocked on stdin's buffer: signal 6, exit 134)."""
    code = tmp_path / "exit-code"
    shell = f'{sys.executable} -m memsync mcp; echo $? > "{code}"'

    async def session_outlived() -> str:
        params = StdioServerParameters(command="/bin/sh", args=["-c", shell], env=_env(), cwd=vault)
        with open(tmp_path / "relayed.err", "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write_),
                ClientSession(read, write_) as session,
            ):
                await session.initialize()
                await session.list_tools()
                daemon.stop()
                with pytest.raises(MCPError):
                    await session.call_tool("memory_search", {"query": "ssh port"})
                with anyio.fail_after(60):  # the client's process ends, and the shell says how
                    while not code.exists():
                        await anyio.sleep(0.05)
        return (tmp_path / "relayed.err").read_text()

    said = anyio.run(session_outlived)
    assert code.read_text() == "1\n"
    assert said.splitlines()[-1] == (
        "memsync: the memsync watch or serve answering this MCP session stopped; "
        "start the session again"
    )
    assert "Fatal" not in said and "Traceback" not in said
    assert ("mcp", "0") not in daemon.relayed()  # served, not ended by its client


def test_while_serve_keeps_a_vault_in_step_its_writer_is_called_memsync_serve(
    vault: Path, tmp_path: Path
) -> None:
    """status (relayed or in its own process), the JSON API, MCP's memory_status, the page and
    a second writer's refusal name `memsync serve`, the command holding the writer lock."""
    token = Tokens().add("agent")
    port = free_port()
    daemon = Daemon(["serve", str(vault), "--listen", f"127.0.0.1:{port}"], tmp_path / "s.log")
    url, pid = f"http://127.0.0.1:{port}", daemon.process.pid
    headers = {"Authorization": f"Bearer {token}"}

    async def memory_status() -> Any:
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write_),
            ClientSession(read, write_) as session,
        ):
            await session.initialize()
            return (await session.call_tool("memory_status", {})).structured_content

    try:
        for relayed in (True, False):
            code, out, _ = run(["status"], vault, relayed=relayed)
            assert code == 0 and f"writer:   memsync serve running (pid {pid} " in out.decode()
        api = httpx2.get(f"{url}/api/status", headers=headers).json()
        assert api["writer"]["role"] == "serve" and api["writer"]["pid"] == pid
        assert anyio.run(memory_status)["writer"]["role"] == "serve"
        page_at = f"{url}{page_prefix(Tokens().path.parent)}/"
        page = httpx2.get(page_at, headers=headers).text
        assert f"writer: memsync serve running (pid {pid}" in page
        code, _, err = run(["watch", str(vault)], vault, relayed=False)
        assert code == 1 and f"being written by memsync serve (pid {pid}".encode() in err
    finally:
        daemon.stop()


# -- `memsync serve --db URL --name NAME`: a reader of a shared PostgreSQL vault, no watcher ----


@pytest.fixture
def served(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> Iterator[tuple[Daemon, Path, list[str]]]:
    """The notes indexed in a PostgreSQL vault and served by `serve --db URL --name NAME`:
    (the server, the vault, the flags that name its index)."""
    url, name = pg_vault
    notes = _notes(tmp_path / "notes")
    root = indexed_vault(notes, db=url, flags=("--name", name), provider="auto", host=HERE)
    flags = ["--db", url, "--name", name]
    Tokens().add("agent")  # a server with no token to admit anyone refuses to start
    listen = ["--listen", f"127.0.0.1:{free_port()}"]
    running = Daemon(["serve", *flags, *listen], tmp_path / "serve.log")
    yield running, root, flags
    running.stop()


def test_a_server_of_a_shared_vault_answers_the_shell_as_its_own_process_would(
    served: tuple[Daemon, Path, list[str]],
) -> None:
    daemon, vault, flags = served
    write(vault, "later.md", "Written after the index: only the vault's writer indexes it.\n")
    _each_command_relayed_as_alone(daemon, vault, flags)
    status = json.loads(run(["status", "--json", *flags], vault, relayed=False)[1])
    assert status["files_indexed"] == 4  # the server only reads: later.md waits for the writer


def test_a_command_for_another_vault_of_the_database_runs_in_its_own_process(
    served: tuple[Daemon, Path, list[str]], tmp_path: Path
) -> None:
    daemon, _, flags = served
    url, other_name = flags[1], f"{flags[3]}_other"
    other = tmp_path / "other"
    write(other, "a.md", "Another vault's note about ports.\n")
    try:
        assert run(["index", str(other), "--db", url, "--name", other_name], other)[0] == 0
        code, out, _ = run(["query", "ports", "--db", url, "--name", other_name], other)
    finally:
        drop_vault(url, other_name)
    assert code == 0 and b"a.md" in out
    assert daemon.relayed() == []  # declined: the client answered it itself


def test_an_index_of_the_vault_a_reader_serves_runs_in_its_own_process(
    served: tuple[Daemon, Path, list[str]],
) -> None:
    daemon, vault, flags = served
    write(vault, "later.md", "Written after the index: the reader has no watcher to index it.\n")
    code, out, _ = run(["index", str(vault), *flags], vault)
    assert code == 0 and b" 1 new, " in out
    assert daemon.relayed() == [] and "relayed index: declined" in daemon.text()


def test_a_server_stopped_by_sigterm_takes_its_endpoint_away(
    served: tuple[Daemon, Path, list[str]],
) -> None:
    daemon, vault, flags = served
    folder = Path(endpoint.run_dir())
    (entry,) = folder.glob("*.json")
    assert json.loads(entry.read_text())["index"].endswith(f"(vault {flags[3]})")
    daemon.stop()
    assert daemon.process.returncode == 0
    assert list(folder.glob("*.json")) == list(folder.glob("*.sock")) == []
    code, out, _ = run(["query", "ssh port", *flags], vault)
    assert code == 0 and b"servers.md" in out  # in its own process now


def test_a_server_of_a_shared_vault_shows_its_url_nowhere_with_the_password(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> None:
    """pgserver trusts local connections, so any password works; its log, its registry entry
    and a relayed answer hold none."""
    secret = "s3cr3t-Pa55"
    url, name = pg_vault
    url = url.replace("postgres:@", f"postgres:{secret}@")
    flags = ["--db", url, "--name", name]
    notes = _notes(tmp_path / "notes")
    root = indexed_vault(notes, db=url, flags=("--name", name), provider="auto", host=HERE)
    Tokens().add("agent")
    daemon = Daemon(["serve", *flags, "--listen", f"127.0.0.1:{free_port()}"], tmp_path / "s.log")
    try:
        code, out, err = run(["status", *flags], root)
        assert code == 0 and daemon.relayed() == [("status", "0")]
        entries = [entry.read_text() for entry in Path(endpoint.run_dir()).glob("*.json")]
        shown = [daemon.text(), *entries, out.decode(), err.decode()]
        assert "serving postgresql://" in shown[0]
        assert [text for text in shown if secret in text] == []
    finally:
        daemon.stop()


def test_a_server_of_an_index_not_found_leaves_the_shell_to_its_own_processes(
    tmp_path: Path,
) -> None:
    Tokens().add("agent")
    missing = ["--db", str(tmp_path / "none.sqlite"), "--listen", f"127.0.0.1:{free_port()}"]
    daemon = Daemon(["serve", *missing], tmp_path / "serve.log", until="serving")
    try:
        assert "not answering the shell: no index at" in daemon.text()
        assert list(Path(endpoint.run_dir()).glob("*.json")) == []
    finally:
        daemon.stop()
    assert daemon.process.returncode == 0


# -- the endpoint in this process: a fake CLI behind it -----------------------------------------


HELD, RELEASED = threading.Event(), threading.Event()  # a command the test holds in the daemon


def _fake_cli(args: list[str], program: str) -> None:
    if args[1] == "held":
        HELD.set()
        RELEASED.wait(60)
    if args[1] == "decline":
        from memsync.memory import NotServedHere

        raise NotServedHere("another index")
    if args[1] == "fail":
        raise ValueError("a bug")
    client = current()  # the client's folder, environment and streams: never the process's
    print(f"{program} answered {args[1]} in {client.cwd}", file=client.stdout)
    print("a notice", file=client.stderr)
    sys.exit(int(client.env.get("FAKE_EXIT", "0")))


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    yield started
    started.stop()


def test_an_answer_keeps_its_streams_exit_code_folder_and_environment(
    relay: Relay, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_EXIT", "3")
    monkeypatch.chdir(tmp_path)
    assert endpoint.relayed(["query", "this"]) == 3
    out, err = capfd.readouterr()
    assert out.endswith(f" answered this in {tmp_path}\n") and err == "a notice\n"


def test_a_declined_or_failed_command_prints_nothing_and_runs_here(
    relay: Relay, capfd: pytest.CaptureFixture[str]
) -> None:
    assert endpoint.relayed(["query", "decline"]) is None
    assert endpoint.relayed(["query", "fail"]) is None
    assert endpoint.relayed(["mcp", "decline"]) is None  # before any of stdin is read
    assert endpoint.relayed(["query", "--help"]) is None
    assert capfd.readouterr() == ("", "")


def test_another_memsync_is_passed_over(
    relay: Relay, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(endpoint, "fingerprint", lambda: "an upgraded memsync")
    assert endpoint.relayed(["query", "this"]) is None
    assert capfd.readouterr() == ("", "")


def test_a_second_process_for_the_same_index_leaves_the_first_ones_endpoint_alone(
    relay: Relay, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    second = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    second.stop()
    assert endpoint.relayed(["query", "this"]) == 0
    assert "answered this" in capfd.readouterr().out


def test_an_entry_a_killed_daemon_left_is_replaced_though_its_pid_is_alive_again(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Its pid taken by another live process (this one, as in a container that starts the
    daemon with the same pid), its socket gone: the new daemon answers."""
    index = SqliteLocation(tmp_path / "index.sqlite")
    folder = endpoint.run_dir()
    assert endpoint.private_dir(folder, create=True)
    for pid in (os.getpid(), os.getppid()):
        entry = {"pid": pid, "index": str(index), "socket": str(tmp_path / "gone.sock")}
        endpoint.write_private(
            os.path.join(folder, f"{endpoint.endpoint_key(str(index))}.json"), entry
        )
        started = Relay(index, _fake_cli).start()
        try:
            assert endpoint.relayed(["query", "this"]) == 0
            assert "answered this" in capfd.readouterr().out
        finally:
            started.stop()


def test_ctrl_c_while_the_daemon_answers_ends_the_client_as_its_own_process_would(
    relay: Relay, tmp_path: Path
) -> None:
    """`memsync: interrupted` and exit 130, as the CLI's boundary says it; no traceback."""
    HELD.clear()
    RELEASED.clear()
    client = subprocess.Popen(
        [sys.executable, "-m", "memsync", "query", "held"],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Ctrl-C as a terminal's process gets it: a suite started in the background of a shell
        # inherits SIGINT ignored, and Python then raises no KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert HELD.wait(60)
        client.send_signal(signal.SIGINT)
        out, err = client.communicate(timeout=60)
    finally:
        RELEASED.set()
    assert (client.returncode, out, err) == (130, b"", b"memsync: interrupted\n")


def test_a_command_that_waits_too_long_for_its_turn_is_answered_by_its_own_process(
    relay: Relay, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A relayed command holding the turn (a relayed index waiting for its vectors) makes the
    next one decline after TURN_WAIT rather than wait behind it."""
    from memsync.daemon import relay as relay_module

    monkeypatch.setattr(relay_module, "TURN_WAIT", 0.2)
    HELD.clear()
    RELEASED.clear()
    held = threading.Thread(target=endpoint.relayed, args=(["query", "held"],))
    held.start()
    try:
        assert HELD.wait(60)  # the held one has the turn
        assert endpoint.relayed(["query", "this"]) is None
    finally:
        RELEASED.set()
        held.join(60)
    assert "answered held" in capfd.readouterr().out


def test_without_unix_sockets_a_loopback_port_wants_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delattr(socket, "AF_UNIX")
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    try:
        (entry,) = Path(endpoint.run_dir()).glob("*.json")
        info = json.loads(entry.read_text())
        assert "socket" not in info and len(info["secret"]) == 64
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600
        assert endpoint.relayed(["get", "this"]) == 0
        assert "answered this" in capfd.readouterr().out
        entry.write_text(json.dumps(info | {"secret": "guessed"}))
        assert endpoint.relayed(["get", "this"]) is None
    finally:
        started.stop()


def test_an_endpoint_that_cannot_be_made_leaves_the_daemon_running_with_one_warning(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Its socket's path taken by a folder (it cannot be replaced): one line in the log, no
    traceback, no entry; every command runs in its own process."""
    index = SqliteLocation(tmp_path / "index.sqlite")
    folder = Path(endpoint.run_dir())
    assert endpoint.private_dir(str(folder), create=True)
    taken = Path(endpoint.socket_path(str(folder), endpoint.endpoint_key(str(index))))
    taken.mkdir()
    started = Relay(index, _fake_cli).start()
    try:
        assert endpoint.relayed(["query", "this"]) is None
    finally:
        started.stop()
    assert caplog.messages == [
        f"not answering the shell (each command runs in its own process): {taken}: Is a directory"
    ]
    out, err = capfd.readouterr()  # the log's own handler, where a test before set one
    assert sorted(folder.iterdir()) == [taken] and out == "" and "Traceback" not in err


class FakeListener:
    """A process on a loopback port that a registry entry names but that does not know the
    entry's secret (another user's, say): it answers a nonce with a made-up proof and keeps
    every byte a client sends it."""

    def __init__(self, folder: Path) -> None:
        self.heard = b""
        self._server = socket.create_server(("127.0.0.1", 0))
        entry = {"pid": os.getpid(), "index": "elsewhere", "port": self._server.getsockname()[1]}
        endpoint.write_private(str(folder / "fake.json"), entry | {"secret": "a" * 64})
        self._thread = threading.Thread(target=self._answer)
        self._thread.start()

    def _answer(self) -> None:
        connection, _ = self._server.accept()
        with connection:
            reader = connection.makefile("rb")
            frame = endpoint.receive(reader)
            self.heard += frame[1] if frame else b""
            endpoint.send_json(connection, endpoint.CONTROL, {"nonce": "n", "proof": "0" * 64})
            connection.settimeout(2.0)  # long enough for a client's environment to arrive
            with contextlib.suppress(OSError):
                while chunk := connection.recv(65536):
                    self.heard += chunk

    def close(self) -> None:
        self._thread.join()
        self._server.close()


def test_over_a_loopback_port_a_listener_without_the_secret_receives_nothing_of_the_client(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The listener proves it knows the secret before the client sends its arguments, folder
    or environment; one that cannot gets a nonce alone, and the command runs in-process."""
    monkeypatch.setenv("MEMSYNC_MARKER", "the-clients-environment")
    folder = Path(endpoint.run_dir())
    assert endpoint.private_dir(str(folder), create=True)
    fake = FakeListener(folder)
    try:
        assert endpoint.relayed(["query", "a-secret-question"]) is None
    finally:
        fake.close()
    (hello,) = [json.loads(fake.heard)]  # one frame, then the client hung up
    assert list(hello) == ["nonce"] and len(hello["nonce"]) == 64
    assert b"the-clients-environment" not in fake.heard and b"a-secret-question" not in fake.heard
    assert capfd.readouterr() == ("", "")


def test_over_a_loopback_port_a_client_without_the_secret_is_not_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener proves itself to anyone, but answers only a client whose own proof (an
    HMAC of both nonces, never the secret) holds; the listener's proof is no client's."""
    monkeypatch.delattr(socket, "AF_UNIX")
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    try:
        (entry,) = Path(endpoint.run_dir()).glob("*.json")
        info = json.loads(entry.read_text())
        for wrong in ("0" * 64, info["secret"], "listener-proof"):
            with socket.create_connection(("127.0.0.1", info["port"]), timeout=10) as connection:
                reader = connection.makefile("rb")
                endpoint.send_json(connection, endpoint.CONTROL, {"nonce": "mine"})
                said = endpoint.control(endpoint.receive(reader))
                assert said is not None
                mac = endpoint.proof(info["secret"], "listener", "mine", said["nonce"])
                assert said["proof"] == mac
                claim = said["proof"] if wrong == "listener-proof" else wrong
                asked = endpoint.request(["query", "this"], claim)
                endpoint.send_json(connection, endpoint.CONTROL, asked)
                assert endpoint.receive(reader) is None  # closed unanswered
    finally:
        started.stop()


def test_over_a_loopback_port_a_peer_that_says_nothing_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsync.daemon import relay as relay_module

    monkeypatch.setattr(relay_module, "HELLO_TIMEOUT", 0.2)
    monkeypatch.delattr(socket, "AF_UNIX")
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    try:
        (entry,) = Path(endpoint.run_dir()).glob("*.json")
        port = json.loads(entry.read_text())["port"]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as silent:
            assert silent.recv(1) == b""  # the listener hung up
    finally:
        started.stop()


def test_over_a_loopback_port_a_frame_larger_than_a_handshake_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any local user may reach a loopback port: a peer not proven yet that announces a frame
    larger than a nonce (or than a command) is hung up on, not read into the daemon's memory."""
    from memsync.daemon import relay as relay_module

    monkeypatch.setattr(relay_module, "HELLO_TIMEOUT", 3600)  # only the size may end it
    monkeypatch.delattr(socket, "AF_UNIX")
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    try:
        (entry,) = Path(endpoint.run_dir()).glob("*.json")
        port = json.loads(entry.read_text())["port"]
        for proven in (False, True):
            with socket.create_connection(("127.0.0.1", port), timeout=60) as peer:
                if proven:  # the listener's handshake done, the request announced too large
                    endpoint.send_json(peer, endpoint.CONTROL, {"nonce": "mine"})
                    assert endpoint.control(endpoint.receive(peer.makefile("rb"))) is not None
                peer.sendall(endpoint.HEADER.pack(endpoint.CONTROL, 1 << 31))
                assert peer.recv(1) == b""  # hung up on, not waiting for 2 GB
    finally:
        started.stop()


def test_a_socket_name_too_long_moves_to_a_short_private_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMSYNC_HOME", str(tmp_path / ("deep" * 30)))
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    try:
        (entry,) = Path(endpoint.run_dir()).glob("*.json")
        where = Path(json.loads(entry.read_text())["socket"])
        assert len(os.fsencode(where)) <= endpoint.SOCKET_NAME_MAX
        assert stat.S_IMODE(where.parent.stat().st_mode) == 0o700
        assert endpoint.relayed(["status", "this"]) == 0
        assert "answered this" in capfd.readouterr().out
    finally:
        started.stop()
    assert not where.exists()


def test_a_folder_others_may_enter_is_no_endpoints_home(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    folder = Path(endpoint.run_dir())
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    try:
        assert list(folder.iterdir()) == []
        assert endpoint.relayed(["query", "this"]) is None
    finally:
        started.stop()
    assert caplog.messages == [
        "not answering the shell (each command runs in its own process): "
        f"{folder} may be entered by other users (mode 0755): chmod 700 {folder}"
    ]


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_another_users_folder_in_tmpdir_is_named_with_its_owner_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another user made $TMPDIR/memsync-UID first: the warning names the folder, its owner,
    and what to do; the commands run in their own processes."""
    for setting in ("MEMSYNC_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(setting, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    taken = tmp_path / f"memsync-{os.getuid()}"
    taken.mkdir(mode=0o700)
    os.chown(taken, 65534, 65534)
    started = Relay(SqliteLocation(tmp_path / "index.sqlite"), _fake_cli).start()
    try:
        assert endpoint.relayed(["query", "this"]) is None
    finally:
        started.stop()
    owner = f"{pwd.getpwuid(65534).pw_name} (uid 65534)"
    assert caplog.messages == [
        "not answering the shell (each command runs in its own process): "
        f"{taken} belongs to {owner}, not to this user: remove it (its owner or root can), "
        "or set TMPDIR to a folder of your own"
    ]
