"""Retrieval metrics, pure: Recall@k, MRR@k and nDCG@k over ranked note paths."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def distinct(paths: Iterable[str]) -> list[str]:
    """Chunk results -> the notes they come from, first occurrence kept."""
    return list(dict.fromkeys(paths))


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


def mrr_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    for position, path in enumerate(ranked[:k], start=1):
        if path in relevant:
            return 1.0 / position
    return 0.0


def ndcg_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    gain = sum(1.0 / math.log2(i + 2) for i, p in enumerate(ranked[:k]) if p in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return gain / ideal if ideal else 0.0


def novelty_ndcg_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """nDCG@k over results that may repeat one note under several names (copies mapped to one
    canonical path by the caller): a repeat earns nothing but still takes its rank, so a list
    filled with copies of one note scores lower than a diverse one."""
    seen: set[str] = set()
    gain = 0.0
    for i, path in enumerate(ranked[:k]):
        if path in relevant and path not in seen:
            gain += 1.0 / math.log2(i + 2)
        seen.add(path)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return gain / ideal if ideal else 0.0


def score_run(
    rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, set[str]]
) -> dict[str, float]:
    """Mean Recall@5, MRR@10 and nDCG@10 over the queries that have judgements."""
    ids = [q for q in qrels if qrels[q]]
    if not ids:
        return {"recall@5": 0.0, "mrr@10": 0.0, "ndcg@10": 0.0, "queries": 0}
    totals = {"recall@5": 0.0, "mrr@10": 0.0, "ndcg@10": 0.0}
    for q in ids:
        ranked = distinct(rankings.get(q, []))
        totals["recall@5"] += recall_at(ranked, qrels[q], 5)
        totals["mrr@10"] += mrr_at(ranked, qrels[q], 10)
        totals["ndcg@10"] += ndcg_at(ranked, qrels[q], 10)
    return {**{k: v / len(ids) for k, v in totals.items()}, "queries": len(ids)}
