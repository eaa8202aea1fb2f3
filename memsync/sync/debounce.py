"""The watcher's debouncer: items in, batches out once things go quiet (or at the latest after
`max_wait`, so that a steady stream of events is still applied), or at once after an item that
someone waits for. A batch holds each item once, and at most `max_items` of them: past that, the
items that `collapses` says stand for less than a full reconcile become one `overflow` item."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class Debouncer(Generic[T]):
    def __init__(
        self,
        items: queue.Queue[T],
        quiet: float,
        max_wait: float,
        urgent: Callable[[T], bool] = lambda item: False,
        max_items: int = 10_000,
        overflow: T | None = None,
        collapses: Callable[[T], bool] = lambda item: True,
    ) -> None:
        self.items = items
        self.quiet = quiet  # seconds without a new item that end a batch
        self.max_wait = max_wait  # seconds a batch may keep growing
        self.urgent = urgent  # an item that ends its batch at once
        self.max_items = max_items  # distinct items a batch keeps before it collapses
        self.overflow = overflow  # what the collapsed items become (None: the batch ends there)
        self.collapses = collapses  # an item that the overflow item stands for

    def put(self, item: T) -> None:
        self.items.put(item)

    def next_batch(self, timeout: float) -> list[T]:
        """The next batch: empty when nothing came within `timeout`; else the first item and
        every item that followed it without a `quiet` gap, for at most `max_wait`, up to the
        first urgent one; each once, in the order they first came."""
        try:
            item = self.items.get(timeout=timeout)
        except queue.Empty:
            return []
        batch: dict[T, None] = {}
        started = time.monotonic()
        while True:
            if not self._add(batch, item) or self.urgent(item):
                break
            if time.monotonic() - started >= self.max_wait:
                break
            try:
                item = self.items.get(timeout=self.quiet)
            except queue.Empty:
                break
        return list(batch)

    def _add(self, batch: dict[T, None], item: T) -> bool:
        """The item in the batch, unless its overflow item is there already; False when the
        batch is full and has no overflow item to collapse into."""
        overflow = self.overflow
        if overflow is not None and overflow in batch and self.collapses(item):
            return True  # a flood: what the overflow item stands for is not kept
        batch[item] = None
        if len(batch) < self.max_items:
            return True
        if overflow is None:
            return False
        for kept in [i for i in batch if self.collapses(i)]:
            del batch[kept]
        batch[overflow] = None
        return True
