"""The optional rerank stage, against a real /rerank server on 127.0.0.1 (conftest's)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from conftest import EmbeddingServer, memsync, write

from memsync.embedders import Reranker
from memsync.errors import EmbeddingResponseError


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    """Keyword-only: the fused order is BM25's, and the reranker is told to prefer another note."""
    root = tmp_path / "notes"
    write(root, "deploy.md", "# Deploy\n\nDeploy staging: deploy staging, deploy it to staging.\n")
    write(root, "runbook.md", "# Runbook\n\nThe staging deploy waits for the quokka check.\n")
    write(root, "other.md", "# Other\n\nNothing about that here.\n")
    assert memsync("index", str(root), "--provider", "none").returncode == 0
    return root


def _query(root: Path, server: EmbeddingServer, *flags: str, **env: str) -> dict:  # type: ignore[type-arg]
    settings = {"MEMSYNC_RERANK_URL": f"{server.url}/v1/rerank", **env}
    done = memsync("query", "deploy staging", "--vault", str(root), "--json", *flags, env=settings)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_reranker_orders_the_top_candidates(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.relevance = lambda query, doc: 1.0 if "quokka" in doc else 0.1
    plain = _query(vault, embedding_server, "--no-rerank")
    assert plain["results"][0]["path"] == "deploy.md" and embedding_server.requests == []
    reranked = _query(vault, embedding_server, "--rerank-top", "5")
    assert [r["path"] for r in reranked["results"][:2]] == ["runbook.md", "deploy.md"]
    assert reranked["results"][0]["rerank_score"] == 1.0
    assert not any("rerank" in n for n in reranked["notices"])
    [sent] = embedding_server.requests
    assert sent["query"] == "deploy staging" and sent["top_n"] == len(sent["documents"]) <= 5
    assert any("quokka check" in d for d in sent["documents"])  # the whole lines it cites


def test_overlapping_chunks_are_listed_with_their_own_lines_and_reranked_by_them(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    """A chunk overlapping a better one of its note is listed with its other lines only: no
    line twice, and the reranker reads the lines each result cites."""
    root = tmp_path / "notes"
    lines = [f"- step {i}: deploy staging, then check service {i} and its logs." for i in range(90)]
    write(root, "long.md", "# Long\n\n" + "\n".join(lines) + "\n")
    assert memsync("index", str(root), "--provider", "none").returncode == 0
    found = _query(root, embedding_server, "--min-score", "0", "-n", "10")
    results = found["results"]
    assert len(results) >= 3 and {r["path"] for r in results} == {"long.md"}
    cited = [set(range(r["start_line"], r["end_line"] + 1)) for r in results]
    assert sum(len(c) for c in cited) == len(set().union(*cited))  # no line listed twice
    ranges = sorted((r["start_line"], r["end_line"]) for r in results)
    assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:]))  # overlapping chunks, cut
    note = (root / "long.md").read_text().split("\n")
    [sent] = embedding_server.requests
    for r in results:
        assert "\n".join(note[r["start_line"] - 1 : r["end_line"]]) in sent["documents"]


def test_text_embeddings_inference_is_spoken_when_configured(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.relevance = lambda query, doc: 1.0 if "quokka" in doc else 0.1
    found = _query(
        vault,
        embedding_server,
        MEMSYNC_RERANK_API="tei",
        MEMSYNC_RERANK_MODEL="bge",
        MEMSYNC_RERANK_API_KEY="sekrit",
    )
    assert found["results"][0]["path"] == "runbook.md"
    [sent] = embedding_server.requests
    assert "texts" in sent and "documents" not in sent
    assert embedding_server.headers[0]["Authorization"] == "Bearer sekrit"


def test_a_failing_reranker_gives_the_results_unreranked_with_a_notice(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.script = [(500, {}), (500, {})]
    found = _query(vault, embedding_server)
    assert found["results"][0]["path"] == "deploy.md"
    assert "rerank_score" not in found["results"][0]
    assert any(n.startswith("results not reranked: rerank answered 500") for n in found["notices"])


def test_a_reranker_that_does_not_answer_costs_the_query_its_time_budget_only(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.delay = 60.0  # the process's own timeout (120 s) would catch a hang
    found = _query(vault, embedding_server, MEMSYNC_QUERY_TIMEOUT="1")
    assert found["results"][0]["path"] == "deploy.md"
    assert any("results not reranked: no answer from" in n for n in found["notices"])


def test_rerank_without_a_reranker_is_a_usage_error_and_nothing_is_sent(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    done = memsync("query", "deploy", "--vault", str(vault), "--rerank")
    assert done.returncode == 2 and "--rerank needs a reranker" in done.stderr
    done = memsync("query", "deploy", "--vault", str(vault))  # not configured: off
    assert done.returncode == 0 and embedding_server.requests == []


@pytest.mark.parametrize(
    "answer",
    [
        {"results": [{"index": 0, "relevance_score": 0.5}]},  # one of two scored
        {"results": [{"index": 0}, {"index": 1}]},  # no scores
        {"data": []},
    ],
)
def test_an_answer_that_is_not_scores_is_a_provider_error(answer: object) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    reranker = Reranker("http://127.0.0.1:9/rerank", "", "jina", timeout=1.0, transport=transport)
    with pytest.raises(EmbeddingResponseError):
        reranker.scores("q", ["a", "b"])
