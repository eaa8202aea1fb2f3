"""kept.py: one copy of what long-lived readers keep of an index, per process."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np

from memsync.store.kept import Kept, kept_for
from memsync.vectors import CalibrationSample, MeanVectors


def _means(version: str) -> MeanVectors:
    return MeanVectors((version,), np.arange(2, dtype=np.int64), np.eye(2, dtype=np.float32))


def test_readers_asking_at_once_wait_for_one_read_and_share_it() -> None:
    kept = Kept()
    reads: list[str] = []
    start = threading.Barrier(4)
    found: list[MeanVectors | None] = []

    def read() -> MeanVectors:
        reads.append("read")
        return _means("v1")

    def ask() -> None:
        start.wait()
        found.append(kept.means(("v1",), lambda: True, lambda old: None, read))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reads == ["read"]
    assert len(found) == 4 and all(means is found[0] for means in found)


def test_a_new_version_is_updated_from_the_old_copy_or_read_whole() -> None:
    kept = Kept()
    first = kept.means(("v1",), lambda: True, lambda old: None, lambda: _means("v1"))
    updated = _means("v2")
    assert kept.means(("v2",), lambda: True, lambda old: updated, lambda: _means("x")) is updated
    whole = _means("v3")
    assert kept.means(("v3",), lambda: True, lambda old: None, lambda: whole) is whole
    assert first is not None and first.version == ("v1",)


def test_vectors_too_many_to_keep_are_let_go_and_asked_about_once_per_version() -> None:
    kept = Kept()
    kept.means(("v1",), lambda: True, lambda old: None, lambda: _means("v1"))
    asked: list[str] = []

    def fit() -> bool:
        asked.append("fit")
        return False

    for _ in range(2):
        assert kept.means(("v2",), fit, lambda old: None, lambda: _means("v2")) is None
    assert asked == ["fit"] and kept._means is None


def test_the_sample_is_kept_per_version() -> None:
    kept = Kept()
    reads: list[str] = []

    def read(version: str) -> CalibrationSample:
        reads.append(version)
        return CalibrationSample.of([], 2)

    first = kept.sample(("v1", 8), lambda: read("v1"))
    assert kept.sample(("v1", 8), lambda: read("again")) is first
    assert kept.sample(("v2", 8), lambda: read("v2")) is not first
    assert reads == ["v1", "v2"]


def test_one_kept_per_index_in_a_process_gone_with_its_last_holder() -> None:
    assert kept_for(("index", 1)) is kept_for(("index", 1))
    assert kept_for(None) is not kept_for(None)  # a connection's own
    held = kept_for(("index", 2))
    gone = weakref.ref(kept_for(("index", 3)))
    gc.collect()
    assert gone() is None
    assert kept_for(("index", 2)) is held
