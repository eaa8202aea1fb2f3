"""Running `memsync serve`: its socket bound first (a port in use is one line), uvicorn on this
thread, the watcher of `memsync serve VAULT` on another, and SIGTERM/SIGINT stopping both: the
requests in flight finish (DRAIN at most), the watcher's batch in progress too, exit 0."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import MemsyncError
from ..sync.watcher import Watcher
from ..web.listen import Listen

log = logging.getLogger("memsync.http")
DRAIN = 3  # seconds a stopping server gives requests in flight and open MCP streams


def bind(listen: Listen) -> socket.socket:
    """The listening socket, or the one line that says why there is none."""
    try:
        made = socket.create_server((listen.host, listen.port), family=listen.family)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MemsyncError(
                f"--listen {listen}: the port is in use (another memsync serve?): choose another "
                "with --listen HOST:PORT"
            ) from exc
        why = exc.strerror or str(exc)
        raise MemsyncError(f"--listen {listen}: cannot listen there ({why})") from exc
    # asyncio turns Nagle off (TCP_NODELAY) only on connections whose socket says TCP, and an
    # accepted one is said as its listener is: create_server's says 0, and each answer on a
    # kept-alive connection then waited ~40 ms for the client's delayed ACK
    return socket.socket(made.family, made.type, socket.IPPROTO_TCP, fileno=made.detach())


class _Server(uvicorn.Server):
    """uvicorn, without its own signal handlers: memsync's stop the watcher too."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _JsonErrors(H11Protocol):
    """uvicorn's HTTP/1.1 protocol (h11, the one it picks without httptools), its own answers in
    memsync's JSON like every other error: a request it cannot parse (a path of raw non-ASCII
    bytes) is a 400. (An app's failure is the app's own JSON: web.app's exception handler.)"""

    def send_400_response(self, msg: str) -> None:
        why = f"{msg} Send HTTP/1.1 with the path and the query percent-encoded."
        body = json.dumps({"error": why}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()


class _Beside(threading.Thread):
    """The watcher on a thread of its own; its end (an error) ends the server too."""

    def __init__(self, watcher: Watcher, server: uvicorn.Server) -> None:
        super().__init__(name="memsync-watch")
        self.watcher = watcher
        self.server = server
        self.error: BaseException | None = None
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            self.watcher.run()
        except BaseException as exc:  # noqa: BLE001 - said by the main thread, in one line
            self.error = exc
        finally:
            self.ended.set()
            self.server.should_exit = True


def uvicorn_server(app: ASGIApp, tls: tuple[Path, Path] | None = None) -> uvicorn.Server:
    """uvicorn for `app`, its TLS files read now (a bad one is one line), its signals left to
    the caller, its log memsync's."""
    config = uvicorn.Config(
        app,
        log_config=None,  # memsync's log handlers, set by the command
        access_log=False,  # its lines hold the query string: a login token, a question
        lifespan="on",
        ws="none",
        server_header=False,
        http=_JsonErrors,
        timeout_graceful_shutdown=DRAIN,
        ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None,
    )
    try:
        config.load()
    except (OSError, ssl.SSLError) as exc:
        raise MemsyncError(f"--tls-cert/--tls-key: cannot load them ({exc})") from exc
    return _Server(config)


def run(server: uvicorn.Server, sock: socket.socket, watcher: Watcher | None, what: str) -> None:
    """Serve until SIGTERM/SIGINT, or until the watcher fails (its error is raised here); `what`
    is logged once the watcher is ready and the server starts."""
    beside = _Beside(watcher, server) if watcher else None

    def stop(*_: object) -> None:  # only sets flags: safe in a signal handler
        server.should_exit = True
        if watcher is not None:
            watcher.request_stop()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    try:
        if beside is not None and watcher is not None:
            beside.start()
            while not (watcher.ready.wait(0.1) or beside.ended.is_set()):
                pass  # the first reconcile (or the lock refused); a signal stops it too
        if not server.should_exit:
            log.info("%s", what)
            with sock:
                server.run(sockets=[sock])
    except SystemExit as exc:  # uvicorn's own way to fail at start; the log says why
        raise MemsyncError("the HTTP server could not start: see the log above") from exc
    finally:
        stop()
        if beside is not None:
            beside.join()
    if beside is not None and beside.error is not None:
        raise beside.error
    log.info("stopped")
