"""Whose command this is: the environment and working folder a command reads, as one value.

A command in a process of its own reads its process's. One that a daemon runs for this user's
shell (serve/relay.py) reads its client's, set for the thread (and the tasks it starts) that runs
it, while the daemon's own threads (the watcher, the HTTP side, other clients' commands) go on
reading the daemon's: nothing in memsync writes the process's environment or changes its folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Invocation:
    env: Mapping[str, str]
    cwd: Path  # absolute

    def path(self, given: str | os.PathLike[str]) -> Path:
        """`given` (a flag's or a variable's path) as this command's shell means it: `~` by its
        HOME, a relative path from its folder."""
        return self.cwd / self.expanded(given)

    def expanded(self, given: str | os.PathLike[str]) -> Path:
        """`given` with `~` by this command's HOME (relative paths stay so, for messages)."""
        text = os.fspath(given)
        home = self.env.get("HOME")
        if home and (text == "~" or text.startswith("~/")):
            text = home + text[1:]
        return Path(os.path.expanduser(text))  # ~user, or ~ without HOME


_CLIENT: ContextVar[Invocation | None] = ContextVar("memsync_invocation", default=None)


def current() -> Invocation:
    """The command being run here: a relayed client's, else this process's own (read, never
    written)."""
    return _CLIENT.get() or Invocation(os.environ, Path(os.getcwd()))


def env() -> Mapping[str, str]:
    return current().env


@contextmanager
def on_behalf_of(invocation: Invocation) -> Iterator[None]:
    """While it lasts, on this thread and the tasks it starts: `invocation`'s command."""
    token = _CLIENT.set(invocation)
    try:
        yield
    finally:
        _CLIENT.reset(token)
