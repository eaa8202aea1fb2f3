"""Where a warm daemon listens for this user's own shell, and the client side of that exchange.

Standard library only, and nothing else of memsync: the shell's `memsync query` imports this
before anything heavy, so that a command a daemon answers costs an interpreter and a socket.
A daemon listens on a Unix socket in a folder only this user can enter (the peer's uid checked
both ways); where Unix sockets are missing, on a loopback port, where both sides prove they know
a secret read from a file only this user can read (the listener first: nothing of the client's
is sent to a process that cannot). Each daemon leaves a registry file naming its endpoint.

A message is a frame: one byte of channel, four of length, the bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys

TYPE_CHECKING = False  # typing itself would be a tenth of this module's import time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from typing import Any, BinaryIO

CONTROL, STDOUT, STDERR, STDIN, EXIT = range(5)
HEADER = struct.Struct(">BI")
# the commands a daemon answers for the shell; index: by the watcher of that index
RELAYED = ("query", "get", "related", "status", "mcp", "index")
SOCKET_NAME_MAX = 100  # bytes: macOS allows 104 with the final NUL, Linux 108
HELLO_TIMEOUT = 2.0  # seconds a live daemon takes to say it heard; a stopped one is passed over
# bytes of a frame from a peer not proven yet, over a loopback port any local user may reach: a
# nonce and its proof; a command's arguments, folder and environment (read before its proof)
HELLO_MAX = 4096
REQUEST_MAX = 4 * 1024 * 1024


def run_dir() -> str:
    """The folder of this user's daemon endpoints: beside the indexes where MEMSYNC_HOME sets
    them, else the runtime folder, else a folder of this user's in the temporary folder. (Paths
    are strings here: pathlib would be most of this module's import time.)"""
    return _run_dir_chosen()[0]


def run_dir_setting() -> str:
    """The environment variable that places run_dir(), for a message on what to change."""
    return _run_dir_chosen()[1]


def _run_dir_chosen() -> tuple[str, str]:
    if os.environ.get("MEMSYNC_HOME"):
        home = os.path.expanduser(os.environ["MEMSYNC_HOME"])
        return os.path.join(home, "run"), "MEMSYNC_HOME"
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "memsync"), "XDG_RUNTIME_DIR"
    return _short_private_dir(), "TMPDIR"


def _short_private_dir() -> str:
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"memsync-{os.getuid()}")


def private_dir(path: str, create: bool) -> bool:
    """True when `path` is a real folder of this user's that nobody else may enter; made so
    (mode 0700) when `create` and absent."""
    return not_private(path, create) is None


def not_private(path: str, create: bool) -> str | None:
    """What keeps `path` from being a real folder of this user's that nobody else may enter
    (None: nothing); made so (mode 0700) when `create` and absent."""
    if create:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"cannot be made ({exc.strerror})"
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if (info.st_mode & 0o170000) == 0o120000:
        return "is a symbolic link, not a folder"
    if (info.st_mode & 0o170000) != 0o040000:
        return "is not a folder"
    if info.st_uid != os.getuid():
        return f"belongs to {_user_name(info.st_uid)}, not to this user"
    if info.st_mode & 0o077:
        return f"may be entered by other users (mode {info.st_mode & 0o777:04o})"
    return None


def _user_name(uid: int) -> str:
    """`nobody (uid 65534)`, or the uid alone where it names no account."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def write_private(path: str, value: object) -> None:
    """`value` as JSON in a file only this user can read, whole or not at all: written beside
    it, made 0600 before a byte is in it, and renamed over it."""
    temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            json.dump(value, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o600)  # a file left by a crash may have had other bits
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def endpoint_key(index: str) -> str:
    """A file name for the daemon of one index (its printable location)."""
    import hashlib

    return hashlib.sha256(index.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def socket_path(folder: str, key: str) -> str:
    """The socket's path: in `folder`, or, where that name is too long for a socket, in a short
    private folder in the temporary folder."""
    path = os.path.join(folder, f"{key}.sock")
    if len(os.fsencode(path)) <= SOCKET_NAME_MAX:
        return path
    return os.path.join(_short_private_dir(), f"{key}.sock")


def fingerprint() -> str:
    """Which memsync answers: its files' sizes and times and the interpreter, so that a daemon
    started before an upgrade (or from another environment) never answers for this one."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    parts = [sys.prefix, sys.version]
    for folder, folders, files in os.walk(package):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            info = os.stat(os.path.join(folder, name))
            parts.append(f"{folder}/{name} {info.st_size} {info.st_mtime_ns}")
    return "\n".join(parts)


def peer_uid(connection: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket, None where the platform
    cannot tell (then the private folder is the only guard)."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid, uid, gid}
        creds = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        return int(struct.unpack("3i", creds)[1])
    if sys.platform == "darwin":  # struct xucred {u_int version; uid_t uid; ...}
        creds = connection.getsockopt(0, getattr(socket, "LOCAL_PEERCRED", 1), 76)
        return int(struct.unpack_from("2I", creds)[1])
    return None


def send(connection: socket.socket, channel: int, data: bytes) -> None:
    connection.sendall(HEADER.pack(channel, len(data)) + data)


def send_json(connection: socket.socket, channel: int, value: Any) -> None:
    send(connection, channel, json.dumps(value).encode())


def receive(stream: BinaryIO, most: int | None = None) -> tuple[int, bytes] | None:
    """The next frame, None at the end of the stream (a daemon gone mid-answer included), or
    for one over `most` bytes, left unread (a peer not proven yet would have it all in memory)."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    channel, length = HEADER.unpack(header)
    if most is not None and length > most:
        return None
    data = stream.read(length)
    return (channel, data) if len(data) == length else None


def control(frame: tuple[int, bytes] | None) -> dict[str, Any] | None:
    """A control frame's object; None for anything else (the end of the stream included)."""
    if frame is None or frame[0] != CONTROL:
        return None
    try:
        said = json.loads(frame[1])
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


def registered() -> Iterator[dict[str, Any]]:
    """The live daemons' registry entries; an entry whose daemon is gone is removed."""
    folder = run_dir()
    if not private_dir(folder, create=False):
        return
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        entry = os.path.join(folder, name)
        try:
            with open(entry, encoding="utf-8") as file:
                info = json.load(file)
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:  # killed before it could clean up: what it left goes
            forget(entry, info.get("socket"))
            continue
        except PermissionError:  # another user's process took the pid: not ours
            continue
        yield info


def forget(entry: str, socket_file: str | None) -> None:
    """A daemon's registry entry and socket removed, and the short socket folder if now empty."""
    for path in (entry, socket_file):
        with contextlib.suppress(OSError, TypeError):
            os.unlink(path)  # type: ignore[arg-type]
    if socket_file and os.path.dirname(socket_file) == _short_private_dir():
        with contextlib.suppress(OSError):
            os.rmdir(_short_private_dir())


def connect(info: dict[str, Any]) -> socket.socket | None:
    """A connection to the daemon an entry names, checked to be this user's; None where it
    does not answer."""
    try:
        if info.get("socket"):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                connection.settimeout(HELLO_TIMEOUT)
                connection.connect(info["socket"])
                uid = peer_uid(connection)
            except OSError:
                connection.close()
                raise
            if uid is not None and uid != os.getuid():
                connection.close()
                return None
        else:
            connection = socket.create_connection(
                ("127.0.0.1", int(info["port"])), timeout=HELLO_TIMEOUT
            )
        return connection
    except (OSError, ValueError, KeyError, TypeError):
        return None


def program_name() -> str:
    """What click calls this program in its messages: `memsync`, or `python -m memsync`."""
    main = sys.modules.get("__main__")
    if getattr(main, "__package__", None) in (None, ""):
        return os.path.basename(sys.argv[0])
    return "python -m memsync"


def relayable(args: list[str]) -> bool:
    """A command a daemon may answer (a reading one, or an index its watcher runs), without a
    request for help (whose width follows this terminal)."""
    return bool(args) and args[0] in RELAYED and not {"-h", "--help"} & set(args)


def proof(secret: str, side: str, client_nonce: str, listener_nonce: str) -> str:
    """What one side of a loopback connection shows to prove it knows the secret, never the
    secret itself: an HMAC of both sides' fresh nonces, named for the side (so that neither
    side's proof can be sent back as the other's)."""
    import hmac

    said = f"{side} {client_nonce} {listener_nonce}".encode()
    return hmac.new(secret.encode(), said, "sha256").hexdigest()


def _listener_proven(connection: socket.socket, reader: BinaryIO, secret: str) -> str | None:
    """Over a loopback port, before anything of this process is sent: the listener proves it
    knows the secret; then this side's proof, to send with the request. None when the listener
    cannot prove it (a process of another user's that took the port)."""
    import hmac

    ours = os.urandom(32).hex()
    send_json(connection, CONTROL, {"nonce": ours})
    said = control(receive(reader, HELLO_MAX))
    if said is None or not isinstance(said.get("nonce"), str):
        return None
    theirs = said["nonce"]
    if not hmac.compare_digest(str(said.get("proof")), proof(secret, "listener", ours, theirs)):
        return None
    return proof(secret, "client", ours, theirs)


def request(args: list[str], proven: str | None) -> dict[str, Any]:
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}
    return {
        "fingerprint": fingerprint(),
        "proof": proven,
        "args": args,
        "program": program_name(),
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "streams": {
            name: {
                "tty": stream.isatty(),
                "encoding": stream.encoding,
                "errors": stream.errors,
            }
            for name, stream in streams.items()
        },
    }


def relayed(args: list[str]) -> int | None:
    """The exit code of `args` answered by a live daemon, its output written here; None when no
    daemon answers it (none runs, none serves that index, one died): then run it in-process."""
    if not relayable(args) or not _plain_streams():
        return None
    named = named_file(args, os.getcwd, os.environ)
    try:
        for info in registered():
            if named is not None and os.path.normpath(str(info.get("index"))) != named:
                continue  # a daemon of another index: not even asked
            connection = connect(info)
            if connection is None:
                continue
            with connection:
                code = _exchange(connection, args, info.get("secret"))
            if code is not None:
                return code
    except OSError:
        return None
    except KeyboardInterrupt:  # Ctrl-C while the daemon answers: as the CLI's own boundary says
        print("memsync: interrupted", file=sys.stderr)
        return 130
    return None


def named_file(args: list[str], cwd: Callable[[], str], env: Mapping[str, str]) -> str | None:
    """The SQLite file a command's --db (else MEMSYNC_DB) names, absolute from the folder `cwd`
    gives, as the command's own process would open it; None where it names none (a PostgreSQL
    URL, or no --db: the vault around the folder) or the folder is gone: the daemon decides."""
    db = env.get("MEMSYNC_DB")
    for at, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--db" and at + 1 < len(args):
            db = args[at + 1]
        elif arg.startswith("--db="):
            db = arg[len("--db=") :]
    if not db or "://" in db:
        return None
    path = os.path.expanduser(db)
    try:
        return os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd(), path))
    except OSError:  # the folder was deleted under the shell
        return None


def _plain_streams() -> bool:
    """stdout and stderr are text streams over files, as a daemon can reproduce them."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None or not hasattr(stream, "buffer") or not stream.encoding:
            return False
    return True


def _exchange(connection: socket.socket, args: list[str], secret: str | None) -> int | None:
    reader = connection.makefile("rb")
    try:
        proven = None
        if secret is not None:
            proven = _listener_proven(connection, reader, secret)
            if proven is None:
                return None
        send_json(connection, CONTROL, request(args, proven))
        hello = receive(reader)  # within HELLO_TIMEOUT: a stopped daemon is passed over
        if hello is None or json.loads(hello[1]).get("declined"):
            return None
        connection.settimeout(None)  # an answer may take a reranker's time
        frames, verdict = _answer(reader)
        if verdict is None or verdict.get("declined"):
            return None  # nothing printed yet: the command runs in this process
        if verdict.get("serving"):  # an MCP session: from here on, a pipe
            stdin = sys.stdin.fileno()  # none (a test's stream): declined, run in-process
            _write(frames)
            return _pipe(connection, reader, stdin)
        _write(frames)
        return int(verdict["exit"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        reader.close()


def _answer(reader: BinaryIO) -> tuple[list[tuple[int, bytes]], dict[str, Any] | None]:
    """The output the daemon made before its verdict, held so that a daemon that dies or
    declines midway leaves nothing printed, and the verdict: the exit code, a decline, or that
    an MCP session is served; None where the daemon went away first."""
    frames: list[tuple[int, bytes]] = []
    while (frame := receive(reader)) is not None:
        channel, data = frame
        if channel in (CONTROL, EXIT):
            return frames, json.loads(data)
        frames.append(frame)
    return frames, None


def _write(frames: list[tuple[int, bytes]]) -> None:
    for channel, data in frames:
        stream = sys.stdout if channel == STDOUT else sys.stderr
        stream.flush()
        stream.buffer.write(data)
        stream.buffer.flush()


def _pipe(connection: socket.socket, reader: BinaryIO, stdin: int) -> int:
    """An MCP session relayed: stdin to the daemon, its stdout and stderr here, until it ends.
    A daemon that stops ends it with one line and exit 1; SIGINT or SIGTERM here ends the
    session and exits 0, as `memsync mcp` in its own process does."""
    import threading

    def forward() -> None:
        # read from the descriptor, not sys.stdin's buffer: this thread is still blocked in the
        # read when a stopped daemon ends the process, and a buffer's lock held then aborts the
        # interpreter's shutdown ("Fatal Python error: _enter_buffered_busy", signal 6)
        with contextlib.suppress(OSError):
            while chunk := os.read(stdin, 65536):
                send(connection, STDIN, chunk)
            send(connection, STDIN, b"")  # stdin closed: the session ends

    threading.Thread(target=forward, daemon=True).start()
    with _stopped_by_signals(connection) as stopped:
        while (frame := receive(reader)) is not None:
            channel, data = frame
            if channel == EXIT:
                return int(json.loads(data)["exit"])
            _write([frame])
    if stopped:
        return 0
    print(
        "memsync: the memsync watch or serve answering this MCP session stopped; "
        "start the session again",
        file=sys.stderr,
    )
    return 1


@contextlib.contextmanager
def _stopped_by_signals(connection: socket.socket) -> Iterator[list[int]]:
    """While it lasts, SIGINT and SIGTERM end the connection (the daemon ends the session),
    and the list it gives holds their numbers, rather than a traceback or death by signal.
    Only the main thread may set handlers: elsewhere the signals keep theirs."""
    import signal
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def end(number: int, _: object) -> None:
        received.append(number)
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)  # the read in progress sees the end

    saved = {number: signal.signal(number, end) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
