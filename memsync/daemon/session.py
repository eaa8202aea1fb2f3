"""A command relayed from this user's shell, while a daemon runs it: the client's streams and
where its log goes. Light on purpose: the CLI asks `current()` on every command."""

from __future__ import annotations

import io
import logging
import socket
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from .endpoint import STDERR, STDOUT, send


class Session:
    """One client's command: its streams and its log, while it runs here."""

    def __init__(self, connection: socket.socket, streams: dict[str, Any]) -> None:
        self.connection = connection
        self._sending = threading.Lock()
        self.stdout = self._stream(STDOUT, streams["stdout"])
        self.stderr = self._stream(STDERR, streams["stderr"])
        self.stdin: Any = None
        self.log_handler: logging.Handler | None = None
        self.serve: Callable[[], None] | None = None  # an MCP session's server, once built

    def send(self, channel: int, data: bytes) -> None:
        with self._sending:
            send(self.connection, channel, data)

    def _stream(self, channel: int, facts: dict[str, Any]) -> io.TextIOWrapper:
        return _ClientStream(
            _Channel(self, channel),
            encoding=facts["encoding"],
            errors=facts["errors"],
            write_through=True,
            tty=bool(facts["tty"]),
        )

    def log_to(self, handler: logging.Handler) -> None:
        """The command's log goes to its client (or its --log-file), not the daemon's log."""
        self.log_handler = handler

    def serve_mcp(self, serve: Callable[[], None]) -> None:
        """An MCP command has built its server: it serves once the setup turn is over."""
        self.serve = serve


# the relayed command this context runs for; None in a process of its own, and in a daemon's
# own threads
SESSION: ContextVar[Session | None] = ContextVar("memsync_relay_session", default=None)


def current() -> Session | None:
    return SESSION.get()


class _Channel(io.RawIOBase):
    """Bytes written here reach the client as frames of one channel, as they are written."""

    def __init__(self, session: Session, channel: int) -> None:
        self.session = session
        self.channel = channel

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        if chunk:
            self.session.send(self.channel, chunk)
        return len(chunk)


class _ClientStream(io.TextIOWrapper):
    """The client's stdout or stderr as seen here: its encoding, and a terminal where it is one."""

    def __init__(self, raw: _Channel, *, tty: bool, **kwargs: Any) -> None:
        super().__init__(raw, **kwargs)  # type: ignore[arg-type]
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty
