"""The watcher's debouncer: items in, batches out once things go quiet (or at the latest after
`max_wait`, so that a steady stream of events is still applied), or at once after an item that
someone waits for."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Debouncer(Generic[T]):
    def __init__(
        self,
        items: queue.Queue[T],
        quiet: float,
        max_wait: float,
        urgent: Callable[[T], bool] = lambda item: False,
    ) -> None:
        self.items = items
        self.quiet = quiet  # seconds without a new item that end a batch
        self.max_wait = max_wait  # seconds a batch may keep growing
        self.urgent = urgent  # an item that ends its batch at once

    def put(self, item: T) -> None:
        self.items.put(item)

    def next_batch(self, timeout: float) -> list[T]:
        """The next batch: empty when nothing came within `timeout`; else the first item and
        every item that followed it without a `quiet` gap, for at most `max_wait`, up to the
        first urgent one."""
        try:
            batch = [self.items.get(timeout=timeout)]
        except queue.Empty:
            return []
        started = time.monotonic()
        while not self.urgent(batch[-1]) and time.monotonic() - started < self.max_wait:
            try:
                batch.append(self.items.get(timeout=self.quiet))
            except queue.Empty:
                break
        return batch
