"""Which embedder the settings ask for: `local`, `openai`, `ollama` or `none` (keyword-only).

`local` runs multilingual-e5-small in-process (embed.local); `openai` and `ollama` speak HTTP
(embed.remote) only when the user chose them. Notes never leave the machine unless a remote
provider was configured explicitly: `auto` picks only `local` or `none`. The rest of memsync
imports the interface and the reranker from here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from .config import OPENAI_URL, Config, env
from .embed import local
from .embed.base import Embedder as Embedder  # re-exported: what the rest of memsync names
from .embed.local import LOCAL_MODEL, LocalEmbedder
from .errors import EmbeddingAuthError, EmbeddingConfigError, EmbeddingError
from .store.protocols import ModelKey

if TYPE_CHECKING:
    from .embed.rerank import Reranker as Reranker

DEFAULT_MODELS = {
    "local": LOCAL_MODEL,
    "openai": "text-embedding-3-small",
    "ollama": "nomic-embed-text",
}
REMOTE_PROVIDERS = ("openai", "ollama")  # they send text over HTTP, maybe off this machine


def resolve_provider(config: Config) -> str:
    """`auto` means local when it is installed, else keyword-only: never a remote service."""
    if config.provider != "auto":
        return config.provider
    return "local" if local.local_available() else "none"


def make_embedder(
    config: Config,
    provider: str | None = None,
    for_queries: bool = False,
    sleep: Callable[[float], None] | None = None,
) -> Embedder | None:
    """The embedder the settings ask for, or None for keyword-only; `sleep` (tests) replaces the
    waits between an HTTP provider's attempts."""

    provider = provider or resolve_provider(config)
    if provider == "none":
        return None
    model = config.model or DEFAULT_MODELS[provider]
    if provider == "local":
        return LocalEmbedder(
            model, batch_size=min(config.batch_size, 16), threads=1 if for_queries else None
        )
    from .embed.remote import OllamaEmbedder, OpenAIEmbedder  # the HTTP code, once one is chosen

    if provider == "openai":
        api_key = env().get("OPENAI_API_KEY")
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
    from .embed.remote import HttpEmbedder

    if isinstance(embedder, HttpEmbedder):  # a query must not hang on a provider that is down
        embedder.total_timeout = config.query_timeout
    return embedder, ""


def make_reranker(config: Config) -> Reranker | None:
    """The configured reranker (embed.rerank), or None: nothing is reranked unless `rerank_url`
    is set. Its HTTP code loads only when a search asks for one."""
    from .embed import rerank

    return rerank.make_reranker(config)
