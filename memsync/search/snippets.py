"""What a result shows, pure: the lines of a chunk that best say why it was found, the lines of
its window nearest the question, and the explanation of its score (--explain)."""

from __future__ import annotations

from ..chunking import read_window_lines
from ..metadata import front_matter_lines
from .ranking import Candidate

# what a line of the chunk's window nearest the question counts for in choosing a snippet,
# beside the question's words it holds: a nudge, so the words decide and the window breaks ties
# (benchmarks/NOTES.md)
FOCUS = 0.2


def snippet(
    text: str,
    words: list[str],
    start_line: int,
    width: int = 3,
    focus: tuple[int, int] | None = None,
) -> tuple[str, int]:
    """The `width` consecutive lines of the chunk that best show why it was found, and where
    they start: the query's words they hold, and the lines of its window nearest the question
    (`focus`: 0-based, the end excluded), since a chunk found by meaning may hold none of its
    words."""
    lines = text.split("\n")
    # front matter is no content to show around a match: `tags: [...]` and `---` above a title
    metadata = front_matter_lines(text) if start_line == 1 else 0
    near = range(*focus) if focus else range(0)
    lowered = [line.lower() for line in lines]
    # a word counts once, shared among the lines that hold it: a speaker's name on every line
    # of a chat tells none of them apart
    holding = {w: sum(1 for line in lowered if w in line) for w in words}

    def line_score(index: int, line: str) -> float:
        hits = sum(1 / holding[w] for w in words if w in lowered[index])
        if not line.strip() or index < metadata:
            return hits
        return hits + 0.1 + (FOCUS if index in near else 0.0)

    scores = [line_score(i, line) for i, line in enumerate(lines)]
    best, best_value = 0, -1.0
    for i in range(max(len(lines) - width + 1, 1)):
        value = sum(scores[i : i + width])
        if value > best_value:
            best, best_value = i, value
    chosen = lines[best : best + width]
    while chosen and not chosen[0].strip():
        chosen.pop(0)
        best += 1
    while chosen and not chosen[-1].strip():
        chosen.pop()
    clipped = [line if len(line) <= 240 else line[:237] + "..." for line in chosen]
    return "\n".join(clipped), start_line + best


def explain(
    candidate: Candidate,
    score: float,
    relevance: float,
    penalties: dict[int, float],
    repeats: dict[int, float],
    nearest: tuple[int, int] | None = None,
) -> dict[str, object]:
    """Why a result scored what it did: each leg raw and calibrated, the exact-match rule, the
    decay factor, the note's repeat factor and the MMR penalty; and the lines of its window
    nearest the question, which the lines shown lean on (`nearest`: 0-based in the chunk, the
    end excluded)."""
    repeat = repeats.get(candidate.id, 1.0)
    first = candidate.start_line
    return {
        "bm25": rounded(candidate.bm25),
        "text_score": rounded(candidate.text_score),
        "cosine": rounded(candidate.cosine),
        "nearest_window": [first + nearest[0], first + nearest[1] - 1] if nearest else None,
        "vector_score": rounded(candidate.vector_score),
        "exact_match": candidate.exact,
        "named_by": candidate.named_by,
        "other_script": candidate.other_script,
        "glossed": candidate.glossed,
        "fused": round(relevance, 4),
        "decay": round(score / relevance / repeat, 4) if relevance else 1.0,
        "note_repeat": round(repeat, 4),
        "mmr_penalty": rounded(penalties.get(candidate.id)),
    }


def nearest_lines(candidate: Candidate) -> tuple[int, int] | None:
    """The lines of the candidate's window nearest the question (0-based in its text, the end
    excluded; a short note's whole vector, which may score it, says no lines); None without
    vectors or their lines, or where those lines are cut away (a result of its note above shows
    them: leaning on the nearest of the rest showed the evidence less often)."""
    if candidate.window_cosines is None or candidate.window_lines is None:
        return None
    lines = read_window_lines(candidate.window_lines)
    nearest = lines[int(candidate.window_cosines[: len(lines)].argmax())]
    return nearest if nearest[1] > nearest[0] else None  # a cut chunk's may be cut away


def rounded(value: float | None) -> float | None:
    """A score as JSON shows it: four decimals, or null for a leg that did not run."""
    return None if value is None else round(value, 4)
