from __future__ import annotations

import math

import pytest

from memsync.search.evaluate import distinct, mrr_at, ndcg_at, recall_at, score_run


def test_metrics_on_a_hand_computed_ranking() -> None:
    ranked = ["a", "x", "b", "y"]
    relevant = {"a", "b"}
    assert recall_at(ranked, relevant, 1) == 0.5 and recall_at(ranked, relevant, 5) == 1.0
    assert mrr_at(["x", "a"], relevant, 10) == 0.5 and mrr_at(["x"], relevant, 10) == 0.0
    ideal = 1 + 1 / math.log2(3)
    assert ndcg_at(ranked, relevant, 10) == pytest.approx((1 + 1 / math.log2(4)) / ideal)
    assert ndcg_at(["a", "b"], relevant, 10) == pytest.approx(1.0)


def test_chunks_of_one_note_count_once() -> None:
    assert distinct(["a", "a", "b", "a"]) == ["a", "b"]
    run = score_run({"q": ["x", "x", "a"]}, {"q": {"a"}})
    assert run["mrr@10"] == 0.5 and run["queries"] == 1
