from __future__ import annotations

import logging
import time
from dataclasses import replace
from email.utils import formatdate
from pathlib import Path

import httpx
import numpy as np
import pytest

from memsync.config import load_config
from memsync.embed.http import retry_after
from memsync.embed.remote import OllamaEmbedder, OpenAIEmbedder
from memsync.embedders import make_embedder, resolve_provider
from memsync.errors import (
    EmbeddingAuthError,
    EmbeddingConfigError,
    EmbeddingResponseError,
    EmbeddingUnavailable,
)
from memsync.redact import scrub
from tests.conftest import EmbeddingServer, write


def _openai(
    server: EmbeddingServer, sleeps: list[float] | None = None, **kw: object
) -> OpenAIEmbedder:
    options = {"batch_size": 3, "timeout": 5.0, "api_key": "sk-secret-123"}
    options.update(kw)
    record = sleeps.append if sleeps is not None else (lambda s: None)
    return OpenAIEmbedder(f"{server.url}/v1", "text-embedding-3-small", sleep=record, **options)  # type: ignore[arg-type]


def test_openai_batches_and_keeps_input_order(embedding_server: EmbeddingServer) -> None:
    embedder = _openai(embedding_server)
    texts = [f"text number {i}" for i in range(7)]
    vectors = embedder.embed_documents(texts)
    assert vectors.shape == (7, 16)
    assert [len(r["input"]) for r in embedding_server.requests] == [3, 3, 1]
    one = embedder.embed_documents(["text number 5"])
    assert np.allclose(one[0], vectors[5])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert embedding_server.headers[0]["Authorization"] == "Bearer sk-secret-123"


def test_429_waits_as_retry_after_says_then_succeeds(embedding_server: EmbeddingServer) -> None:
    embedding_server.script = [(429, {"Retry-After": "7"}), (503, {})]
    sleeps: list[float] = []
    vectors = _openai(embedding_server, sleeps).embed_documents(["a", "b"])
    assert vectors.shape == (2, 16)
    assert sleeps == [7.0, 1.0]
    assert len(embedding_server.requests) == 3


def test_500_every_time_gives_up_with_unavailable(embedding_server: EmbeddingServer) -> None:
    embedding_server.script = [(500, {})] * 10
    sleeps: list[float] = []
    with pytest.raises(EmbeddingUnavailable, match="500"):
        _openai(embedding_server, sleeps).embed_documents(["a"])
    assert sleeps == [0.5, 1.0, 2.0, 4.0]


def test_timeout_is_retried_then_reported(embedding_server: EmbeddingServer) -> None:
    embedding_server.delay = 0.5
    embedder = _openai(embedding_server, [], timeout=0.1)
    embedder.max_attempts = 2
    with pytest.raises(EmbeddingUnavailable, match="no answer from"):
        embedder.embed_documents(["a"])


def test_refused_connection_is_unavailable() -> None:
    embedder = OpenAIEmbedder(
        "http://127.0.0.1:9/v1", "m", batch_size=2, timeout=1.0, sleep=lambda s: None
    )
    with pytest.raises(EmbeddingUnavailable):
        embedder.embed_documents(["a"])


def test_401_and_404_fail_at_once_with_clear_errors(
    embedding_server: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    embedding_server.script = [(401, {})]
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingAuthError, match="API key"):
        _openai(embedding_server).embed_documents(["a"])
    embedding_server.script = [(404, {})]
    with pytest.raises(EmbeddingConfigError, match="not found"):
        _openai(embedding_server).embed_documents(["a"])
    assert "sk-secret-123" not in caplog.text
    assert len(embedding_server.requests) == 2


def test_vectors_of_mixed_sizes_are_refused() -> None:
    """One answer, two sizes: refused here; a size that differs from the index's is refused by
    the sync (test_sync), which knows what the index holds."""

    def handler(request: httpx.Request) -> httpx.Response:
        data = [{"index": 0, "embedding": [0.1] * 8}, {"index": 1, "embedding": [0.1] * 9}]
        return httpx.Response(200, json={"data": data})

    embedder = OpenAIEmbedder(
        "http://x/v1", "m", batch_size=2, timeout=1.0, transport=httpx.MockTransport(handler)
    )
    with pytest.raises(EmbeddingResponseError, match=r"sizes \[8, 9\]"):
        embedder.embed_documents(["first", "second"])


def test_malformed_answer_is_a_response_error() -> None:
    embedder = OpenAIEmbedder(
        "http://x/v1",
        "m",
        batch_size=1,
        timeout=1.0,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"nope": 1})),
    )
    with pytest.raises(EmbeddingResponseError):
        embedder.embed_documents(["a"])


def test_ollama_api_embed_with_nomic_prefixes(embedding_server: EmbeddingServer) -> None:
    embedder = OllamaEmbedder(embedding_server.url, "nomic-embed-text", batch_size=8, timeout=5.0)
    assert embedder.embed_documents(["a note"]).shape == (1, 16)
    embedder.embed_query("a question")
    assert embedding_server.requests[0]["input"] == ["search_document: a note"]
    assert embedding_server.requests[1]["input"] == ["search_query: a question"]


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert retry_after("3", 1.0, 60) == 3.0
    assert retry_after(None, 1.5, 60) == 1.5
    assert retry_after("999", 1.0, 60) == 60
    assert 8 <= retry_after(formatdate(time.time() + 10, usegmt=True), 1.0, 60) <= 10
    assert retry_after("soon", 2.0, 60) == 2.0


def test_auto_never_picks_a_remote_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-anything")
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:1")
    assert resolve_provider(load_config()) in ("local", "none")
    monkeypatch.setattr("memsync.embed.local.local_available", lambda: False)
    assert resolve_provider(load_config()) == "none"
    assert make_embedder(load_config()) is None


def test_provider_key_is_a_fingerprint_not_the_key(embedding_server: EmbeddingServer) -> None:
    embedder = _openai(embedding_server)
    assert "sk-secret" not in embedder.key.provider_key
    assert embedder.key.provider_key == _openai(embedding_server, api_key="other").key.provider_key


def test_an_endpoint_s_credentials_go_with_each_request_and_are_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """user:password@ and an api_key parameter in an endpoint's URL: sent as before, absent from
    what describes the embedder, its errors and its log lines; a URL that cannot be cut with
    certainty is refused without any part of it."""
    import base64

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0, 0.0]}]})

    url = "http://ana:pw%23S3cr@127.0.0.1:9/v1?api_key=Qk-77"
    options = {"batch_size": 2, "timeout": 1.0, "sleep": lambda s: None}
    mock = httpx.MockTransport(answer)
    embedder = OpenAIEmbedder(url, "m", transport=mock, **options)  # type: ignore[arg-type]
    assert embedder.embed_documents(["a"]).shape == (1, 2)
    login = base64.b64encode(b"ana:pw#S3cr").decode()
    assert seen[0].headers["Authorization"] == f"Basic {login}"
    assert str(seen[0].url) == "http://ana@127.0.0.1:9/v1/embeddings?api_key=Qk-77"
    assert embedder.describe() == "openai m at http://ana@127.0.0.1:9/v1"
    with caplog.at_level(logging.WARNING), pytest.raises(EmbeddingUnavailable) as down:
        OpenAIEmbedder(url, "m", **options).embed_documents(["a"])  # type: ignore[arg-type]
    assert "cannot reach http://ana@127.0.0.1:9/v1" in str(down.value)
    for unsure in ("http://ana:pw#S3cr@127.0.0.1:9/v1", "http://ana:p@S3cr@127.0.0.1:9/v1"):
        with pytest.raises(EmbeddingConfigError, match="OPENAI_BASE_URL cannot be read") as bad:
            OpenAIEmbedder(unsure, "m", **options)  # type: ignore[arg-type]
        assert "S3cr" not in str(bad.value)
    shown = str(down.value) + caplog.text
    assert caplog.text and "S3cr" not in shown and "Qk-77" not in shown


def test_a_team_index_of_a_remote_provider_is_queried_only_when_this_reader_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memsync.embedders import embedder_for_index
    from memsync.store.protocols import ModelKey

    monkeypatch.setenv("OPENAI_API_KEY", "sk-exported-for-something-else")
    key = ModelKey("openai", "text-embedding-3-small", "f")
    embedder, why = embedder_for_index(load_config(), key, shared=True)
    assert embedder is None and 'set provider = "openai"' in why and "MEMSYNC_PROVIDER" in why
    assert embedder_for_index(load_config(provider="openai"), key, shared=True)[0] is not None
    assert embedder_for_index(load_config(), key)[0] is not None  # the user's own index
    ollama = ModelKey("ollama", "nomic-embed-text", "f")
    assert embedder_for_index(load_config(provider="local"), ollama, shared=True)[0] is None


def test_an_unreachable_server_error_says_which_setting_points_at_it() -> None:
    embedder = OllamaEmbedder(
        "http://127.0.0.1:9", "m", batch_size=2, timeout=1.0, sleep=lambda s: None
    )
    with pytest.raises(EmbeddingUnavailable, match="check OLLAMA_HOST"):
        embedder.embed_documents(["a"])


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda vs: [[float("nan")] * len(v) for v in vs], "NaN or infinite"),
        (lambda vs: [[0.0] * len(v) for v in vs], "all-zero vector"),
        (lambda vs: [["x"] * len(v) for v in vs], "not lists of numbers"),
    ],
)
def test_vectors_without_a_direction_are_a_provider_error(
    embedding_server: EmbeddingServer, spoil: object, message: str
) -> None:
    embedding_server.transform = spoil  # type: ignore[assignment]
    with pytest.raises(EmbeddingResponseError, match=message):
        _openai(embedding_server).embed_documents(["a", "b"])


def test_nan_vectors_are_never_stored_and_queries_still_work(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    from memsync.search.options import Options
    from memsync.search.pipeline import search
    from memsync.store.sqlite_store import SqliteStore
    from memsync.sync.syncer import index_vault

    write(tmp_path / "v", "a.md", "# A\n\nport 6380\n")
    embedding_server.transform = lambda vs: [[float("nan")] * len(v) for v in vs]
    with SqliteStore(tmp_path / "i.sqlite") as store:
        with pytest.raises(EmbeddingResponseError):
            index_vault(store, tmp_path / "v", 1 << 20, _openai(embedding_server))
        assert store.counts()["embedded"] == 0 and store.pending_count() == 1
        outcome = search(store, "port 6380", Options(), _openai(embedding_server))
        assert [h.path for h in outcome.results] == ["a.md"]


def test_an_error_body_that_echoes_the_key_is_redacted(embedding_server: EmbeddingServer) -> None:
    embedding_server.script = [(400, {})]
    with pytest.raises(EmbeddingResponseError) as raised:
        _openai(embedding_server).embed_documents(["a"])
    assert "sk-secret-123" not in str(raised.value) and "***" in str(raised.value)
    assert scrub("Authorization: Bearer abc.def-ghi_123456") == ("Authorization: Bearer ***")
    assert scrub('{"api_key": "zzzzzzzzzzzz"}') == '{"api_key": "***"}'


def test_a_hung_server_costs_a_query_its_own_short_timeout_retries_included(
    embedding_server: EmbeddingServer,
) -> None:
    import time

    from memsync.config import load_config
    from memsync.embedders import embedder_for_index

    embedding_server.delay = 3.0  # far longer than the query's budget
    config = load_config(
        provider="openai", openai_base_url=f"{embedding_server.url}/v1", query_timeout=0.5
    )
    probe = _openai(embedding_server)
    embedder, why = embedder_for_index(
        config, type(probe.key)("openai", "text-embedding-3-small", probe.provider_key)
    )
    assert embedder is not None and why == ""
    started = time.monotonic()
    with pytest.raises(EmbeddingUnavailable, match="no answer from"):
        embedder.embed_query("anything")
    assert time.monotonic() - started < 2.0  # 0.5 s budget; never the 60 s indexing timeout


def test_requests_overlap_rows_keep_their_order_and_a_failing_batch_is_retried(
    embedding_server: EmbeddingServer,
) -> None:
    from memsync.vectors import normalise

    embedding_server.delay = 0.2
    embedding_server.script = [(503, {})]  # the first answer fails: its batch is sent again
    sleeps: list[float] = []
    embedder = _openai(embedding_server, sleeps, batch_size=2, in_flight=4)
    texts = [f"note number {i} about topic {i % 3}" for i in range(16)]
    vectors = embedder.embed_documents(texts)
    one_by_one = normalise(np.array([embedding_server._model._vector(t) for t in texts]))
    assert np.allclose(vectors, one_by_one)  # each row is its own text's, in order
    assert 2 <= embedding_server.most_in_flight <= 4
    assert sleeps == [0.5] and len(embedding_server.requests) == 9
    sequential = _openai(embedding_server, batch_size=2)
    embedding_server.most_in_flight = 0
    sequential.embed_documents(texts[:6])
    assert embedding_server.most_in_flight == 1  # in_flight 1: one request at a time


def test_indexing_keeps_requests_in_flight_and_a_provider_that_fails_loses_no_text(
    tmp_path: Path, embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsync.embed import http
    from memsync.memory import Memory, index, search_options

    monkeypatch.setattr(http, "pause", lambda seconds: None)  # retries without the waits

    vault = tmp_path / "v"
    for i in range(40):
        write(vault, f"n{i}.md", f"# Note {i}\n\nword{i} shared text\n")
    embedding_server.delay = 0.05
    config = load_config(
        db=str(tmp_path / "i.sqlite"),
        provider="openai",
        openai_base_url=f"{embedding_server.url}/v1",
        batch_size=4,
    )
    assert config.requests_in_flight == 4
    done = index(config, vault)
    assert done.report.embedded == 40 and embedding_server.most_in_flight >= 2
    write(vault, "late.md", "# Late\n\nquokka arrives\n")
    embedding_server.down = True  # every request fails now
    with pytest.raises(EmbeddingUnavailable, match="text is indexed"):
        index(replace(config, requests_in_flight=2), vault)
    with Memory.open(config) as memory:
        found = memory.search("quokka", search_options(config, mode="keyword"))
    assert [hit.path for hit in found.results] == ["late.md"]
    embedding_server.down = False
    assert index(config, vault).report.embedded == 1  # the late note's chunk, nothing lost
