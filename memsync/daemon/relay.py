"""The daemon's side of the local endpoint: this user's `memsync query`, `get`, `status` and
`mcp`, answered by the warm process that watches the index they read, and `index`, by its watcher.

A relayed command runs the CLI itself, in this process, with the client's arguments,
environment, working folder and streams, so that it prints what a cold process prints, byte for
byte: only what is slow to start (imports, the model) is warm. The environment and the folder
travel with the command as a value (memsync.invocation), never set on the process, whose other
threads (the watcher, the HTTP side) go on with the daemon's own. Relayed commands take turns
while they set up; an MCP session lets the next one in once its server is built. A command for
another index, or one that fails in a way this process cannot vouch for, is declined before
anything reaches the client, which then answers it itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..config import Invocation, on_behalf_of
from ..memory import NotServedHere, Serving, serving_only
from ..store.locate import Location
from .endpoint import (
    CONTROL,
    EXIT,
    HELLO_MAX,
    HELLO_TIMEOUT,
    REQUEST_MAX,
    STDIN,
    connect,
    control,
    endpoint_key,
    fingerprint,
    forget,
    not_private,
    peer_uid,
    proof,
    receive,
    registered,
    run_dir,
    run_dir_setting,
    send_json,
    socket_path,
    write_private,
)
from .session import SESSION, Session

if TYPE_CHECKING:
    from ..sync.watcher import Watcher

Answer = Callable[[list[str], str], None]  # the CLI: arguments, program name; it exits

log = logging.getLogger("memsync.relay")
TURN_WAIT = 2.0  # seconds a relayed command waits for the one before it, then is declined


class _SessionLog(logging.Handler):
    """memsync's log records made for a relayed command, handed to that command's handler."""

    def emit(self, record: logging.LogRecord) -> None:
        session = SESSION.get()
        handler = session.log_handler if session is not None else None
        if handler is not None and record.levelno >= handler.level:
            handler.handle(record)


def _daemon_only(record: logging.LogRecord) -> bool:
    return SESSION.get() is None


@contextlib.contextmanager
def _routed_log() -> Iterator[None]:
    """While the endpoint is open: memsync's log follows the session."""
    memsync_log = logging.getLogger("memsync")
    level = memsync_log.level
    handlers = [(handler, handler.level) for handler in memsync_log.handlers]
    for handler, _ in handlers:
        handler.addFilter(_daemon_only)
        handler.setLevel(max(handler.level, memsync_log.getEffectiveLevel()))
    to_sessions = _SessionLog()
    memsync_log.addHandler(to_sessions)
    memsync_log.setLevel(logging.DEBUG)  # each handler keeps its own level
    try:
        yield
    finally:
        memsync_log.removeHandler(to_sessions)
        memsync_log.setLevel(level)
        for handler, handler_level in handlers:
            handler.removeFilter(_daemon_only)
            handler.setLevel(handler_level)


class Relay:
    """The endpoint of one daemon, answering for `index` (its Location) with `answer`; a
    relayed `memsync index` goes to `watcher`, the daemon's writer of that index, if it has one."""

    def __init__(self, index: Location, answer: Answer, watcher: Watcher | None = None) -> None:
        self.index = index
        self.answer = answer
        self.watcher = watcher
        self.fingerprint = fingerprint()
        # one relayed command at a time: a relayed `index` holds it until its vectors are done,
        # and a command that cannot have it within TURN_WAIT runs in its own process instead
        self._turn = threading.Lock()
        self._listener: socket.socket | None = None
        self._registry: Path | None = None
        self._socket: Path | None = None
        self._secret: str | None = None
        self._routing = contextlib.ExitStack()
        self._accepting: threading.Thread | None = None

    def start(self) -> Relay:
        """Listen, register, and answer on a thread of its own; nothing when the folder is not
        private or another process answers for the index already (a second reader of a shared
        vault): then every command simply runs in its own process, or goes to that one."""
        folder = Path(run_dir())
        if not _private(folder, run_dir_setting()):
            return self
        if self._answered_elsewhere():
            log.info("not answering the shell: another memsync process answers for %s", self.index)
            return self  # its endpoint's files are named after the index: they stay its own
        try:
            if not self._listen(folder):
                return self
        except OSError as exc:  # a socket path taken, a full disk: the daemon goes on without
            self._unlisten()
            where = f"{exc.filename}: " if exc.filename else ""
            log.warning(
                "not answering the shell (each command runs in its own process): %s%s",
                where,
                exc.strerror or exc,
            )
            return self
        self._routing.enter_context(_routed_log())
        self._accepting = threading.Thread(target=self._accept, name="memsync-relay", daemon=True)
        self._accepting.start()
        log.info("answering this user's memsync commands for %s", self.index)
        return self

    def _listen(self, folder: Path) -> bool:
        """The endpoint open and its registry entry written; False when the socket's folder
        is not private."""
        key = endpoint_key(str(self.index))
        entry: dict[str, Any] = {"pid": os.getpid(), "index": str(self.index)}
        if hasattr(socket, "AF_UNIX"):
            where = Path(socket_path(str(folder), key))
            self._listener, entry["socket"] = self._unix_listener(where)
        else:
            self._listener, entry["port"], entry["secret"] = self._loopback_listener()
        if self._listener is None:
            return False
        registry = folder / f"{key}.json"
        write_private(str(registry), entry)
        self._registry = registry
        return True

    def _unlisten(self) -> None:
        """What a failed _listen made, gone: its listener and its socket file."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.unlink()
            self._socket = None

    def _answered_elsewhere(self) -> bool:
        """Whether another live endpoint answers for this index: its entry names the index and
        its endpoint takes a connection (an entry a killed daemon left, whose pid a process
        took since, this one's included, is replaced)."""
        for other in registered():
            if other.get("index") != str(self.index):
                continue
            connection = connect(other)
            if connection is not None:
                connection.close()
                return True
        return False

    def _unix_listener(self, path: Path) -> tuple[socket.socket | None, str]:
        if path.parent != Path(run_dir()) and not _private(path.parent, "TMPDIR"):
            return None, ""  # a socket name too long for run_dir: in the temporary folder
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a daemon killed before it could clean up
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            self._socket = path
            os.chmod(path, 0o600)
            listener.listen(16)
        except OSError:
            listener.close()
            raise
        return listener, str(path)

    def _loopback_listener(self) -> tuple[socket.socket, int, str]:
        listener = socket.create_server(("127.0.0.1", 0))
        self._secret = secrets.token_hex(32)
        return listener, listener.getsockname()[1], self._secret

    def stop(self) -> None:
        """No new command is heard; one being answered finishes on its own thread."""
        if self._registry is not None:
            forget(str(self._registry), str(self._socket) if self._socket else None)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(), which close() does not
            self._listener.close()
        if self._accepting is not None:
            self._accepting.join()
        self._routing.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed: the daemon stops
            threading.Thread(
                target=self._serve, args=(connection,), name="memsync-relayed", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            if self._secret is None and peer_uid(connection) not in (None, os.getuid()):
                return  # a Unix socket's peer is another user's process
            connection.settimeout(HELLO_TIMEOUT)  # a peer that says nothing is not waited for
            reader = connection.makefile("rb")
            expected = self._proven_to(connection, reader) if self._secret else None
            if self._secret is not None and expected is None:
                return  # no nonce: not a memsync client
            wanted = control(receive(reader, REQUEST_MAX))
            if wanted is None:
                return
            if expected is not None and not secrets.compare_digest(
                str(wanted.get("proof")), expected
            ):
                return  # a client that does not know the secret
            if wanted.get("fingerprint") != self.fingerprint:
                send_json(connection, CONTROL, {"declined": "another memsync"})
                return
            send_json(connection, CONTROL, {"heard": True})
            connection.settimeout(None)  # an MCP session's stdin may be quiet for hours
            self._run(connection, reader, wanted)

    def _proven_to(self, connection: socket.socket, reader: BinaryIO) -> str | None:
        """Over a loopback port: this listener's proof that it knows the secret, for the
        client's nonce, and the proof the client must send back; None without a nonce."""
        assert self._secret is not None
        said = control(receive(reader, HELLO_MAX))
        if said is None or not isinstance(said.get("nonce"), str):
            return None
        ours = secrets.token_hex(32)
        mine = proof(self._secret, "listener", said["nonce"], ours)
        send_json(connection, CONTROL, {"nonce": ours, "proof": mine})
        return proof(self._secret, "client", said["nonce"], ours)

    def _run(self, connection: socket.socket, reader: BinaryIO, wanted: dict[str, Any]) -> None:
        session = Session(connection, wanted["streams"])
        token = SESSION.set(session)
        # the client's environment, folder and streams, for an MCP session it serves too
        client = Invocation(wanted["env"], Path(wanted["cwd"]), session)
        try:
            with on_behalf_of(client):
                code = self._answered(connection, reader, wanted, session)
        finally:
            SESSION.reset(token)
            if session.stdin is not None:  # served or declined, its pipe is done with
                session.stdin.buffer.close()
        session.stdout.flush()
        session.stderr.flush()
        log.debug(
            "relayed %s: %s", wanted["args"][0], "declined" if code is None else f"exit {code}"
        )
        send_json(connection, EXIT, {"declined": True} if code is None else {"exit": code})

    def _answered(
        self, connection: socket.socket, reader: BinaryIO, wanted: dict[str, Any], session: Session
    ) -> int | None:
        """The command's exit code, an MCP session served until it ends; None when declined."""
        # a turn that stays taken (a relayed index waiting for its vectors) declines this
        # command: its client answers it in its own process rather than wait behind it
        taken = self._turn.acquire(timeout=TURN_WAIT)
        code = self._in_turn(session, reader, wanted) if taken else None
        if code is not None and session.serve is not None:
            send_json(connection, CONTROL, {"serving": True})
            try:
                session.serve()  # the MCP session, until the client's stdin closes
            except Exception:  # noqa: BLE001 - this session ends; the daemon goes on
                log.exception("a relayed MCP session failed")
                code = 1
        return code

    def _in_turn(self, session: Session, reader: BinaryIO, wanted: dict[str, Any]) -> int | None:
        """The command run as the client's process would, the turn then given back: its exit
        code, None when declined."""
        try:
            if wanted["args"][0] == "mcp":
                session.stdin = _StdinStream(_stdin_from(reader))
            return self._command(session, wanted["args"], wanted["program"])
        finally:
            self._turn.release()

    def _command(self, session: Session, args: list[str], program: str) -> int | None:
        """The command's exit code, None when this process declines it."""
        only = serving_only.set(Serving(self.index, self.watcher))
        try:
            self.answer(args, program)
            return 0
        except SystemExit as done:
            return _exit_code(done.code, session)
        except NotServedHere:
            return None
        except Exception as exc:  # noqa: BLE001 - the client's own process will tell the user
            log.warning("declined a relayed %s: %s", args[0], exc.__class__.__name__)
            return None
        finally:
            serving_only.reset(only)


def _private(folder: Path, setting: str) -> bool:
    """Whether `folder` is this user's alone (made so where absent); if not, the log says what
    is wrong with it and what to do, and every command runs in its own process."""
    problem = not_private(str(folder), create=True)
    if problem is None:
        return True
    if problem.startswith("may be entered"):
        advice = f"chmod 700 {folder}"
    else:
        advice = f"remove it (its owner or root can), or set {setting} to a folder of your own"
    log.warning(
        "not answering the shell (each command runs in its own process): %s %s: %s",
        folder,
        problem,
        advice,
    )
    return False


def _exit_code(code: object, session: Session) -> int:
    """As the interpreter turns sys.exit's argument into a process's exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    session.stderr.write(f"{code}\n")
    return 1


def _stdin_from(reader: BinaryIO) -> BinaryIO:
    """The client's stdin, fed from its frames through a pipe until it closes."""
    read_end, write_end = os.pipe()

    def feed() -> None:
        with open(write_end, "wb", buffering=0) as pipe, contextlib.suppress(OSError):
            while (frame := receive(reader)) is not None and frame[0] == STDIN and frame[1]:
                pipe.write(frame[1])

    threading.Thread(target=feed, name="memsync-relayed-stdin", daemon=True).start()
    return open(read_end, "rb")


class _StdinStream:
    """stdin as a text stream's owner sees it: `.buffer` holds the bytes."""

    def __init__(self, buffer: BinaryIO) -> None:
        self.buffer = buffer

    def isatty(self) -> bool:
        return False
