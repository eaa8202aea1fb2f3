"""The interface every embedding provider implements: `embed_documents` and `embed_query`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..store.protocols import ModelKey

if TYPE_CHECKING:  # numpy is imported when vectors are made: a no-op sync never needs it
    import numpy as np


class Embedder(ABC):
    provider: str
    model: str
    batch_size: int = 32
    in_flight: int = 1  # batches embed_documents may have in flight at once

    @property
    def key(self) -> ModelKey:
        return ModelKey(self.provider, self.model, self.provider_key)

    @property
    def provider_key(self) -> str:
        """A fingerprint of where vectors come from; never the API key itself."""
        return ""

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text."""

    @abstractmethod
    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector, in the same space as the documents'."""

    def describe(self) -> str:
        return f"{self.provider} {self.model}"
