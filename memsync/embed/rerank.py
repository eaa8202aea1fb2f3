"""The reranker: a /rerank server's scores for a query's candidates, checked before use."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from ..config import Config
from ..errors import EmbeddingResponseError
from .http import MB, HttpService


class Reranker(HttpService):
    """Any server speaking the common /rerank API: the Jina/Cohere body (llama.cpp server, vLLM,
    Infinity, Jina, Cohere) or Text Embeddings Inference's (`rerank_api = "tei"`). It is sent the
    query and the candidates' text, to the URL the user configured and nowhere else."""

    provider = "rerank"
    url_setting = "MEMSYNC_RERANK_URL"
    key_setting = "MEMSYNC_RERANK_API_KEY"
    max_attempts = 2  # a query's budget leaves room for one retry at most
    max_body = 4 * MB  # 200 candidates' scores, with their texts echoed, take a fraction of it

    def __init__(
        self,
        url: str,
        model: str,
        api: str,
        *,
        timeout: float,
        api_key: str | None = None,
        transport: object | None = None,
    ) -> None:
        super().__init__(url, timeout=timeout, api_key=api_key, transport=transport)
        self.model = model
        self.api = api
        self.total_timeout = timeout

    def describe(self) -> str:
        return f"{self.model or 'the reranker'} at {self.base_url}"

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document, in their order."""
        if self.api == "tei":
            payload: dict[str, object] = {"query": query, "texts": list(documents)}
        else:
            payload = {"query": query, "documents": list(documents), "top_n": len(documents)}
            if self.model:
                payload["model"] = self.model
        body = self._exchange(self.base_url, payload)
        return checked_scores(body, self.api, len(documents))


def checked_scores(body: object, api: str, count: int) -> list[float]:
    """Pure: the `count` scores in a reranker's answer, in the documents' order; refused with
    EmbeddingResponseError unless each document has one finite score under one whole index."""
    key = "score" if api == "tei" else "relevance_score"
    items = body if api == "tei" else body.get("results") if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise EmbeddingResponseError("the reranker sent an answer that is not scores")
    found: dict[int, float] = {}
    for item in items:
        index, score = item.get("index"), item.get(key)
        if type(index) is not int or not 0 <= index < count or index in found:
            raise EmbeddingResponseError(
                f"the reranker sent index {_quoted(index)} for {count} candidates: each must "
                "be a whole number in range, once"
            )
        number = _finite(score)
        if number is None:
            raise EmbeddingResponseError(
                f"the reranker sent {_quoted(score)} as a score, not a finite number"
            )
        found[index] = number
    if len(found) != count:
        raise EmbeddingResponseError(f"the reranker scored {len(found)} of {count} candidates")
    return [found[i] for i in range(count)]


def _finite(value: object) -> float | None:
    """A score as a float, or None for one that is not a finite number: JSON's integers have no
    bound, and one past float's range (`1` and 400 zeros) cannot be converted."""
    if type(value) not in (int, float):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _quoted(value: object) -> str:
    """A value from a server's answer as a message quotes it: short, on one line."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def make_reranker(config: Config) -> Reranker | None:
    """The configured reranker, or None: nothing is reranked unless `rerank_url` is set."""
    from ..config import env

    if not config.rerank_url:
        return None
    return Reranker(
        config.rerank_url,
        config.rerank_model,
        config.rerank_api,
        timeout=config.query_timeout,
        api_key=env().get("MEMSYNC_RERANK_API_KEY"),
    )
