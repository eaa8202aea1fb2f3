"""debounce: items in, batches out once things go quiet, and never later than max_wait."""

from __future__ import annotations

import queue
import threading
import time

from memsync.sync.debounce import Debouncer


def test_nothing_within_the_timeout_is_an_empty_batch() -> None:
    started = time.monotonic()
    assert Debouncer(queue.Queue(), 0.05, 1.0).next_batch(0.02) == []
    assert time.monotonic() - started < 0.5


def test_a_burst_is_one_batch_in_order_and_the_next_item_starts_another() -> None:
    batches: Debouncer[int] = Debouncer(queue.Queue(), 0.05, 5.0)
    for item in range(5):
        batches.put(item)
    assert batches.next_batch(1.0) == [0, 1, 2, 3, 4]
    batches.put(5)
    assert batches.next_batch(1.0) == [5]


def test_a_quiet_gap_ends_a_batch() -> None:
    batches: Debouncer[str] = Debouncer(queue.Queue(), 0.05, 5.0)
    batches.put("a")
    later = threading.Timer(0.3, batches.put, args=("b",))
    later.start()
    try:
        assert batches.next_batch(1.0) == ["a"]
        assert batches.next_batch(1.0) == ["b"]
    finally:
        later.join()


def test_a_steady_stream_is_cut_at_max_wait() -> None:
    batches: Debouncer[int] = Debouncer(queue.Queue(), 0.2, 0.3)
    stop = threading.Event()

    def stream() -> None:
        count = 0
        while not stop.is_set():
            batches.put(count)
            count += 1
            time.sleep(0.01)  # the stream under test: an event well within the quiet window

    feeder = threading.Thread(target=stream)
    feeder.start()
    try:
        started = time.monotonic()
        first = batches.next_batch(1.0)
        assert time.monotonic() - started < 1.0  # not waiting for a quiet that never comes
        assert first == list(range(len(first))) and len(first) > 5
    finally:
        stop.set()
        feeder.join()


def test_an_urgent_item_ends_its_batch_at_once() -> None:
    batches: Debouncer[str] = Debouncer(queue.Queue(), 30.0, 60.0, urgent=lambda item: item == "!")
    batches.put("a")
    batches.put("!")
    batches.put("b")
    started = time.monotonic()
    assert batches.next_batch(1.0) == ["a", "!"]  # not a quiet half minute later
    assert time.monotonic() - started < 1.0
    batches.put("!")
    assert batches.next_batch(1.0) == ["b", "!"]


def test_a_burst_naming_one_item_many_times_keeps_it_once() -> None:
    batches: Debouncer[str] = Debouncer(queue.Queue(), 0.05, 5.0)
    for item in ["a", "b", "a", "a", "c", "b"]:
        batches.put(item)
    assert batches.next_batch(1.0) == ["a", "b", "c"]


def test_past_max_items_what_collapses_becomes_one_overflow_item_and_the_rest_is_kept() -> None:
    batches: Debouncer[str] = Debouncer(
        queue.Queue(), 0.05, 5.0, max_items=5, overflow="ALL", collapses=str.islower
    )
    for item in ["a", "KEEP", "b", "c", "d", "e", "f", "AGAIN", "g"]:
        batches.put(item)
    assert batches.next_batch(1.0) == ["KEEP", "ALL", "AGAIN"]
    batches.put("h")
    assert batches.next_batch(1.0) == ["h"]  # the next batch starts afresh


def test_past_max_items_without_an_overflow_item_the_batch_ends_and_nothing_is_lost() -> None:
    batches: Debouncer[int] = Debouncer(queue.Queue(), 0.05, 5.0, max_items=3)
    for item in range(7):
        batches.put(item)
    assert [batches.next_batch(1.0) for _ in range(3)] == [[0, 1, 2], [3, 4, 5], [6]]
