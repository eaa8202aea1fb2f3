"""Vectors for the chunks that lack one: the embedding cache first, then the model, a few
batches a round, so `index` and the watcher's embedding worker (a thread) can stop between
rounds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..chunking import embed_inputs
from ..embedders import Embedder
from ..errors import EmbeddingError, EmbeddingResponseError, MemsyncError
from ..store.locate import Location
from ..store.protocols import ModelKey, PendingChunk, StoreWriter
from ..vectors import to_blob

log = logging.getLogger("memsync.sync")

STOP_CHECK = 0.25  # seconds between looks at the stop flag while waiting for a pass
Progress = Callable[[int], None]
# opens a progress display for (label, total) and returns its update function
ProgressFactory = Callable[[str, int], Progress]


@dataclass(frozen=True)
class Embedded:
    embedded: int  # vectors stored by this call
    pending: int  # chunks still without one


def embed_pending(
    store: StoreWriter,
    embedder: Embedder,
    progress: ProgressFactory | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    adopt_new_size: bool = False,
) -> Embedded:
    """Give every chunk without a vector one, cache first, then the model, a batch at a time.

    A model that answers with another vector size than the index holds is a provider error, unless
    `adopt_new_size` (an explicit `memsync index`): then every vector is made again at the new size.
    """
    key = embedder.key
    if store.model_key() != key or store.dims() is None:
        sample = store.pending_chunks(1, any_chunk=True)
        if not sample:
            return Embedded(0, 0)
        probe = embedder.embed_documents(_inputs(sample[0])[:1])
        store.set_model(key, int(probe.shape[1]))  # a new model: every old vector goes
    dims = store.dims() or 0
    total = store.pending_count()
    update = progress("Embedding chunks", total) if progress and total else None
    with store.loading_vectors(total):
        stored = _embed_rounds(store, embedder, key, dims, update, should_stop, adopt_new_size)
    return Embedded(stored, store.pending_count())


def text_only(exc: EmbeddingError, pending: int) -> EmbeddingError:
    """What `memsync index` says when the provider fails once the text is written."""
    return type(exc)(
        f"{exc}. The text is indexed (keyword search works); {pending} chunks still need "
        "vectors: run memsync index again"
    )


def _inputs(chunk: PendingChunk) -> list[str]:
    """What the model reads for a stored chunk: the inputs its hash was computed from."""
    return embed_inputs(chunk.context, chunk.text, chunk.whole, chunk.overlap)


def _embed_rounds(
    store: StoreWriter,
    embedder: Embedder,
    key: ModelKey,
    dims: int,
    update: Progress | None,
    should_stop: Callable[[], bool],
    adopt_new_size: bool,
) -> int:
    """The vectors stored, round after round, until none is missing or `should_stop()`."""
    done = 0
    while not should_stop():
        # a few batches a round (as many as the provider takes at once): a watcher stops between
        batch = store.pending_chunks(embedder.batch_size * embedder.in_flight)
        if not batch:
            break
        blobs = store.cached_embeddings(key, [chunk.hash for chunk in batch])
        missing = {c.hash: _inputs(c) for c in batch if c.hash not in blobs}
        if missing:
            vectors = embedder.embed_documents([w for inputs in missing.values() for w in inputs])
            if vectors.shape[1] != dims:
                if not adopt_new_size:
                    raise EmbeddingResponseError(
                        f"{embedder.describe()} now returns {vectors.shape[1]}-dimension vectors "
                        f"but the index holds {dims}: if the model behind that name changed, stop "
                        "the watcher and run memsync index VAULT to embed every chunk again"
                    )
                log.warning(
                    "%s changed size %d -> %d: embedding every chunk again",
                    embedder.describe(),
                    dims,
                    vectors.shape[1],
                )
                store.set_model(key, int(vectors.shape[1]))
                dims = int(vectors.shape[1])
                continue
            at = 0
            for chunk_hash, inputs in missing.items():  # a chunk's windows, one blob
                blobs[chunk_hash] = to_blob(vectors[at : at + len(inputs)])
                at += len(inputs)
        stored = store.store_embeddings(key, [(c.id, c.hash, blobs[c.hash]) for c in batch], dims)
        done += stored
        if update:
            update(len(batch))
        if stored == 0 and store.model_key() != key:
            break  # someone switched the model under us; stop rather than loop
    return done


class EmbeddingWorker(threading.Thread):
    """Computes vectors for chunks that lack one; waits on a signal, never polls."""

    def __init__(
        self,
        location: Location,
        embedder: Embedder,
        stop: threading.Event,
        retry_base: float,
        publish: Callable[..., None],
    ) -> None:
        super().__init__(name="memsync-embed", daemon=True)
        self.retry_base = retry_base
        self.publish = publish  # puts facts where `memsync status` reads them
        self.location = location
        self.embedder = embedder
        self.stop = stop
        self.wake = threading.Event()
        self.failures = 0
        self.last_error = ""
        # passes over the chunks without vectors, begun and ended, and how the last one ended:
        # a relayed `index` waits for one that begins after the text it wrote
        self._passes = threading.Condition()
        self._begun = self._ended = 0
        self._outcome: Embedded | EmbeddingError | None = None

    def run(self) -> None:
        """Never dies: any failure is logged, published for `status`, and retried with backoff."""
        while not self.stop.is_set():
            try:
                with self.location.open(create=True) as store:
                    self._serve(store)
            except Exception as exc:  # noqa: BLE001 - a worker must not die silently
                self._failed(exc)
                self._begin_pass()  # one that could not begin: whoever waits for one hears
                self._end_pass(None)
                self.wake.clear()  # a wake that came meanwhile asked for the pass just failed
                self.wake.wait(self._backoff())

    def _serve(self, store: StoreWriter) -> None:
        while not self.stop.is_set():
            self.wake.clear()
            self._begin_pass()
            wait = None
            try:
                done = embed_pending(store, self.embedder, should_stop=self.stop.is_set)
                if done.embedded:
                    log.info("embedded %d chunks (%d waiting)", done.embedded, done.pending)
                if self.failures:
                    self.publish(embedding_error=None)
                    log.info("embedding works again")
                self.failures, self.last_error = 0, ""
                self._end_pass(done)
            except EmbeddingError as exc:
                self._failed(exc)
                self._end_pass(text_only(exc, store.pending_count()))
                wait = self._backoff()
            self.wake.wait(wait)

    def _begin_pass(self) -> None:
        with self._passes:
            self._begun += 1

    def _end_pass(self, outcome: Embedded | EmbeddingError | None) -> None:
        with self._passes:
            self._ended, self._outcome = self._begun, outcome
            self._passes.notify_all()

    def caught_up(self) -> Embedded | EmbeddingError | None:
        """Blocks until a pass that begins after this call has ended, which leaves no chunk
        written before it without a vector unless it failed: what it left waiting, or its
        provider's error as `index` words it; None when the worker stops or fails otherwise."""
        with self._passes:
            after = self._begun
            self.wake.set()
            while self._ended <= after and not self.stop.is_set():
                self._passes.wait(STOP_CHECK)
            return None if self.stop.is_set() else self._outcome  # a pass a stop cut short

    def _backoff(self) -> float:
        doublings = min(max(self.failures, 1) - 1, 20)  # 2.0 ** 1024 would overflow
        return min(self.retry_base * 2.0**doublings, 300.0)

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = str(exc)
        if isinstance(exc, MemsyncError):
            log.warning(
                "embedding failed (%s); keyword search stays fresh; retry in %.0fs",
                exc,
                self._backoff(),
            )
        else:
            log.error(  # one line: a traceback in the daemon's log helps no user
                "embedding failed unexpectedly (%s: %s); retry in %.0fs",
                exc.__class__.__name__,
                exc,
                self._backoff(),
            )
        # logged first: whoever sees the error in `status` finds it in the log too (a test that
        # waited for the one and read the other failed on a busy machine)
        self.publish(embedding_error=f"{exc} (retrying, attempt {self.failures})")
