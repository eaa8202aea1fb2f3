"""What long-lived readers keep of an index between queries, its mean vectors and its calibration
sample, one copy per process: the connections a server lends in turn (serve opens several) share
it, read again once when the index changes. They share it only where they agree on the index's
version (sql_reading's _kept_version); a connection whose version is its own keeps a copy alone."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ..vectors import CalibrationSample, MeanVectors


class Kept:
    """One index's kept values, each read again when it is not of the version asked for: one
    connection reads while the others wait for its copy (reading their own would hold two)."""

    def __init__(self) -> None:
        self._means_turn = threading.Lock()
        self._sample_turn = threading.Lock()
        self._means: MeanVectors | None = None
        self._too_many: Any = None  # the version at which the mean vectors did not fit
        self._sample: tuple[Any, CalibrationSample] | None = None

    def means(
        self,
        version: Any,
        fit: Callable[[], bool],
        update: Callable[[MeanVectors], MeanVectors | None],
        read: Callable[[], MeanVectors],
    ) -> MeanVectors | None:
        """The mean vectors at `version`: those kept, else `update(the ones kept before)`, else
        `read()`; None while `fit()` says they would take too much memory."""
        with self._means_turn:
            kept = self._means
            if kept is not None and kept.version == version:
                return kept
            if self._too_many == version:
                return None
            self._means = None
            if not fit():
                self._too_many = version
                return None
            updated = update(kept) if kept is not None else None
            del kept  # the old copy let go before a whole new one is read
            self._means = read() if updated is None else updated
            return self._means

    def sample(self, version: Any, read: Callable[[], CalibrationSample]) -> CalibrationSample:
        """The calibration sample at `version`: the one kept, else `read()`."""
        with self._sample_turn:
            if self._sample is None or self._sample[0] != version:
                self._sample = None
                self._sample = (version, read())
            return self._sample[1]


_BY_INDEX: weakref.WeakValueDictionary[Hashable, Kept] = weakref.WeakValueDictionary()
_NAMING = threading.Lock()


def kept_for(index: Hashable | None) -> Kept:
    """The process's Kept of `index`, made on first need and gone with the last connection that
    holds it; for None (a connection whose version is its own) one of its own."""
    if index is None:
        return Kept()
    with _NAMING:
        kept = _BY_INDEX.get(index)
        if kept is None:
            kept = Kept()
            _BY_INDEX[index] = kept
        return kept
