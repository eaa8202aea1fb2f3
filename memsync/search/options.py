"""What one query asks for: the mode, the number of results, the threshold, the weights, decay,
diversity, the rerank and the notes to search, each default the one Config declares."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import date

from ..config import Config
from ..filters import NoteFilter

_SETTINGS = Config()  # the documented defaults live in Config only
SAMPLE_CHUNKS = 256  # chunks whose nearest windows calibrate a query's cosines
MIN_POOL = 40  # candidates a leg brings at least: what -n 10 brings (LoCoMo, SciFact measure there)


@dataclass(frozen=True)
class Options:
    mode: str = _SETTINGS.mode  # hybrid | vector | keyword | rrf
    limit: int = _SETTINGS.limit
    min_score: float = _SETTINGS.min_score
    decay: bool = _SETTINGS.decay
    half_life: float = _SETTINGS.half_life
    mmr: bool = _SETTINGS.mmr
    mmr_lambda: float = _SETTINGS.mmr_lambda
    vector_weight: float = _SETTINGS.vector_weight
    text_weight: float = _SETTINGS.text_weight
    rerank: bool = _SETTINGS.rerank  # with a reranker configured
    rerank_top: int = _SETTINGS.rerank_top
    only: NoteFilter = NoteFilter()  # search only these notes (paths from path_globs)
    explain: bool = False  # attach how each score came about
    today: date | None = None  # for decay; None means the real today

    @classmethod
    def from_settings(cls, settings: object) -> Options:
        """The query settings of a Config (the same names)."""
        names = [f.name for f in fields(cls) if hasattr(settings, f.name)]
        return cls(**{name: getattr(settings, name) for name in names})


def pool_size(limit: int) -> int:
    """Candidates each leg brings: 4 per result asked for, and never fewer than -n 10 brings,
    so that the first results of `-n 2` (as an agent asks) are those of `-n 10`: a chunk beyond
    a small pool lost its keyword score (and a note the query names, its lift)."""
    return max(limit * 4, MIN_POOL)
