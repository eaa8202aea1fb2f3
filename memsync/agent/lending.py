"""Index connections lent to calls one at a time, in the order the calls asked for them."""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import StoreError

if TYPE_CHECKING:
    from ..memory import Memory

log = logging.getLogger("memsync.mcp")


class Turns:
    """The index connections, lent one call at a time in the order calls asked: one given back
    goes straight to the call that has waited longest, so that no call is passed over while
    newer ones are served (a plain queue lets a new caller take it first). The one given back
    last is lent first: it is the warmest."""

    def __init__(self, slots: int) -> None:
        self._lock = threading.Lock()
        self._free = list(range(slots))
        self._waiting: collections.deque[tuple[threading.Event, list[int]]] = collections.deque()

    def take(self, timeout: float | None = None) -> int:
        """A free slot, waiting for one; queue.Empty after `timeout` seconds."""
        with self._lock:
            if self._free and not self._waiting:
                return self._free.pop()
            handed: list[int] = []
            turn = (threading.Event(), handed)
            self._waiting.append(turn)
        if not turn[0].wait(timeout):
            with self._lock:
                if not handed:  # not handed one while the wait timed out
                    self._waiting.remove(turn)
                    raise queue.Empty
        return handed[0]

    def give(self, slot: int) -> None:
        with self._lock:
            if self._waiting:
                event, handed = self._waiting.popleft()
                handed.append(slot)
                event.set()
            else:
                self._free.append(slot)


class Connections:
    """One server's index connections, each opened on first need and kept open (vectors in
    memory), each serving one call at a time (tools run on worker threads)."""

    def __init__(self, open_memory: Callable[[], Memory], slots: int = 1) -> None:
        self.open_memory = open_memory
        self._memories: list[Memory | None] = [None] * slots
        self._free = Turns(slots)
        self._held = threading.local()  # the slot this thread's call holds

    def memory(self, slot: int = 0) -> Memory:
        opened = self._memories[slot]
        if opened is None:
            opened = self._memories[slot] = self.open_memory()
        return opened

    @contextlib.contextmanager
    def borrowed(self) -> Iterator[Memory]:
        """An index connection for one call, waiting for one to be free; one whose database
        went away (a server restarted, a disk) is opened again by the next call."""
        self._held.slot = self._free.take()
        try:
            yield self.memory(self._held.slot)
        except StoreError as exc:
            if exc.reopen:
                log.warning("%s; the index is opened again on the next call", exc)
                self._close(self._held.slot)
            raise
        finally:
            self._free.give(self._held.slot)

    @contextlib.contextmanager
    def unlocked(self) -> Iterator[None]:
        """Inside a call: its slot let go while it waits on something other than the index (a
        reranker), so that the other calls are answered meanwhile; a free one taken back after."""
        self._free.give(self._held.slot)
        try:
            yield
        finally:
            self._held.slot = self._free.take()

    def wait_for_calls(self, seconds: float) -> None:
        """Every connection taken, so that the calls in progress (a write) have finished; at
        most `seconds` of waiting."""
        deadline = time.monotonic() + seconds
        with contextlib.suppress(queue.Empty):
            for _ in self._memories:
                self._free.take(timeout=max(deadline - time.monotonic(), 0))

    def close(self) -> None:
        for slot in range(len(self._memories)):
            self._close(slot)

    def _close(self, slot: int) -> None:
        memory, self._memories[slot] = self._memories[slot], None
        if memory is not None:
            with contextlib.suppress(Exception):  # a connection the server dropped may not close
                memory.close()
