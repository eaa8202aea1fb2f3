"""The vector leg's calibration, over numpy: a cosine's z-score against this query's cosines with
a sample of the index (e5's cosines crowd 0.7-0.9, other models' sit lower: the z-score does not
care), squashed by a logistic centred at z = 2.5, of width 1.25 (2.0 for a chunk in another
script than the question's: across scripts cosines say less), each script measured from its own
mean. Only the vector side (vector_side) imports it: a keyword query never loads numpy."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..vectors import placed_scripts

# the logistic that maps a cosine's z-score to [0, 1]: 0.5 at Z_CENTRE. Wide enough that the
# keyword leg still orders chunks the vectors barely tell apart; narrower, a chunk a fraction of
# a spread nearer the question outweighs every keyword difference (benchmarks/NOTES.md)
Z_CENTRE, Z_WIDTH = 2.5, 1.25
# across scripts the small multilingual model's cosines say less (a short Chinese title lands
# near English pages on nothing they share), so the same z-score counts less there: a flatter
# logistic, and the question's glosses on the keyword leg order what the vectors barely tell
# apart. The width best for Chinese questions and sample_vault (benchmarks/NOTES.md)
Z_WIDTH_ACROSS = 2.0


def calibrate_cosine(
    cosines: np.ndarray, sample_cosines: np.ndarray, width: float | np.ndarray = Z_WIDTH
) -> np.ndarray:
    """Cosine -> [0, 1] by its z-score against the query's cosines with a sample of the index
    (`width`: the logistic's, one for all or one per cosine)."""
    cosines = np.asarray(cosines, dtype=np.float64)
    if sample_cosines.size < 8:
        clipped: np.ndarray = np.clip(cosines, 0.0, 1.0)  # too small an index to know its spread
        return clipped
    mean, spread = float(sample_cosines.mean()), float(sample_cosines.std())
    z = (cosines - mean) / max(spread, 1e-6)
    return 1.0 / (1.0 + np.exp(-(z - Z_CENTRE) / width))


MIN_NOTES = 4  # sampled notes of a script needed to place its mean (the spread is pooled)


def calibrate_by_script(
    cosines: np.ndarray,
    scripts: Sequence[str],
    sample_cosines: np.ndarray,
    sampled_from: Sequence[tuple[str, str]],
    query_script: str,
) -> np.ndarray:
    """calibrate_cosine with each script's own mean: a multilingual model puts a query nearer
    every text in its own language, so a Chinese note's cosine with an English question is
    measured from where Chinese notes sit, in the spread of every script around its own mean
    (pooled: a few vectors give a steady mean but no steady spread). `sampled_from` holds each
    sampled chunk's (script, note); a script sampled from fewer than MIN_NOTES notes is measured
    as the whole sample is. A chunk in another script than the question's (`query_script`) is scored
    on the flatter Z_WIDTH_ACROSS."""
    cosines = np.asarray(cosines, dtype=np.float64)
    widths = np.array([Z_WIDTH if kind == query_script else Z_WIDTH_ACROSS for kind in scripts])
    overall = float(sample_cosines.mean()) if sample_cosines.size else 0.0
    means = script_means(sample_cosines, sampled_from)
    if _one_script(means, sampled_from):
        return calibrate_cosine(cosines, sample_cosines, widths)  # nothing to move
    centre = (
        np.array([means.get(kind, overall) for kind, _ in sampled_from]) if sampled_from else 0.0
    )
    pooled = sample_cosines - centre + overall
    shifted = cosines - np.array([means.get(kind, overall) for kind in scripts]) + overall
    return calibrate_cosine(shifted, pooled, widths)


def script_means(
    sample_cosines: np.ndarray, sampled_from: Sequence[tuple[str, str]]
) -> dict[str, float]:
    """The mean sampled cosine of each script sampled from MIN_NOTES notes or more. Notes, not
    chunks: the chunks of one long note share its subject as well as its language, so their mean
    is how near the question is to that note, and moving the note's chunks by it took away the
    very match (a Chinese question about the one long Chinese note of an English vault scored
    its chunks as average ones)."""
    kinds = np.array([kind for kind, _ in sampled_from])
    return {
        kind: float(sample_cosines[kinds == kind].mean())
        for kind in placed_scripts(sampled_from, MIN_NOTES)
    }


def _one_script(means: dict[str, float], sampled_from: Sequence[tuple[str, str]]) -> bool:
    """The sample holds one script (or none), placed by its own mean: nothing to move apart."""
    return len(means) < 2 and set(means) >= {kind for kind, _ in sampled_from}


def script_shift_range(
    sample_cosines: np.ndarray, sampled_from: Sequence[tuple[str, str]]
) -> float:
    """How far calibrate_by_script may move two chunks' cosines apart (0 with one script): a
    chunk of another script up to this much below the vector pool's last cosine may still rank
    above it once moved, so the pool is cut this much lower."""
    means = script_means(sample_cosines, sampled_from)
    if _one_script(means, sampled_from):
        return 0.0
    placed = [*means.values(), float(sample_cosines.mean())]
    return max(placed) - min(placed)
