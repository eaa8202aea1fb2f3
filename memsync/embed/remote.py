"""The HTTP embedding providers: any OpenAI-compatible /v1/embeddings, and Ollama's /api/embed.

They send text off this process, so they are used only when the user chose them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import EmbeddingResponseError
from ..vectors import normalise
from .base import Embedder
from .http import HttpService

if TYPE_CHECKING:
    import numpy as np


class HttpEmbedder(HttpService, Embedder):
    """Batches of texts to an embedding endpoint, a few requests in flight while indexing."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        batch_size: int,
        timeout: float,
        api_key: str | None = None,
        transport: object | None = None,
        sleep: Callable[[float], None] | None = None,
        in_flight: int = 1,
    ) -> None:
        super().__init__(
            base_url, timeout=timeout, api_key=api_key, transport=transport, sleep=sleep
        )
        self.model = model
        self.batch_size = batch_size
        self.in_flight = in_flight  # batches sent at once: a remote API's latency overlapped
        self.dims: int | None = None

    @property
    def provider_key(self) -> str:
        return self._fingerprint

    def describe(self) -> str:
        return f"{self.provider} {self.model} at {self.base_url}"

    @abstractmethod
    def _request(self, texts: Sequence[str]) -> tuple[str, dict[str, object]]:
        """The URL and JSON body for one batch."""

    @abstractmethod
    def _vectors(self, body: object) -> list[list[float]]:
        """The vectors in a response body, in input order."""

    def _post(self, texts: Sequence[str]) -> np.ndarray:
        """One batch, retried (HttpService), its vectors checked."""
        body = self._exchange(*self._request(texts))
        try:
            vectors = self._vectors(body)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise EmbeddingResponseError(
                f"{self.provider} sent an answer that is not embeddings"
            ) from exc
        return self._checked(vectors, len(texts))

    def _checked(self, vectors: list[list[float]], expected: int) -> np.ndarray:
        import numpy as np

        if len(vectors) != expected:
            raise EmbeddingResponseError(
                f"{self.provider} returned {len(vectors)} vectors for {expected} texts"
            )
        sizes = {len(v) for v in vectors}
        if len(sizes) != 1 or 0 in sizes:
            raise EmbeddingResponseError(
                f"{self.provider} returned vectors of sizes {sorted(sizes)}"
            )
        size = sizes.pop()  # the index, not this object, decides which size is right
        try:
            matrix = np.array(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingResponseError(
                f"{self.provider} returned vectors that are not lists of numbers"
            ) from exc
        matrix = normalise(matrix, f"{self.provider} {self.model}")
        self.dims = size
        return matrix

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Batch by batch, up to `in_flight` requests at once (each retried on its own); the
        rows in the order of `texts`. A batch that fails for good fails the call, after the
        others have finished: nothing is stored from it, and the text stays indexed."""
        import numpy as np

        batches = [
            [self.document_prefix + t for t in texts[i : i + self.batch_size]]
            for i in range(0, len(texts), self.batch_size)
        ]
        if len(batches) > 1 and self.in_flight > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(self.in_flight, len(batches))) as pool:
                parts = list(pool.map(self._post, batches))
        else:
            parts = [self._post(batch) for batch in batches]
        return np.vstack(parts) if parts else np.zeros((0, self.dims or 0), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self._post([self.query_prefix + text])[0]
        return vector

    document_prefix = ""
    query_prefix = ""


class OpenAIEmbedder(HttpEmbedder):
    """Any OpenAI-compatible /v1/embeddings: OpenAI, LM Studio, vLLM, llama.cpp server."""

    provider = "openai"
    url_setting = "OPENAI_BASE_URL"

    def _request(self, texts: Sequence[str]) -> tuple[str, dict[str, object]]:
        return f"{self.base_url}/embeddings", {"model": self.model, "input": list(texts)}

    def _vectors(self, body: object) -> list[list[float]]:
        data = sorted(body["data"], key=lambda item: item.get("index", 0))  # type: ignore[index]
        return [item["embedding"] for item in data]


class OllamaEmbedder(HttpEmbedder):
    """Ollama's /api/embed, which takes a list of inputs."""

    provider = "ollama"
    url_setting = "OLLAMA_HOST"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if self.model.startswith("nomic-embed"):  # nomic's models expect task prefixes
            self.document_prefix, self.query_prefix = "search_document: ", "search_query: "

    def _request(self, texts: Sequence[str]) -> tuple[str, dict[str, object]]:
        return f"{self.base_url}/api/embed", {"model": self.model, "input": list(texts)}

    def _vectors(self, body: object) -> list[list[float]]:
        return list(body["embeddings"])  # type: ignore[index]
