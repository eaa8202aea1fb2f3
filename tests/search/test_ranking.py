from __future__ import annotations

import math
from dataclasses import replace
from datetime import date

import numpy as np
import pytest

from memsync.chunking import cut_window_lines
from memsync.metadata import note_date
from memsync.search.calibration import is_exact
from memsync.search.cosines import calibrate_by_script, calibrate_cosine
from memsync.search.options import Options
from memsync.search.query import identifiers, query_words
from memsync.search.ranking import (
    OVERLAP,
    REPEAT,
    Candidate,
    decay_factor,
    fuse,
    jaccard,
    mmr,
    rank,
    spread_notes,
)
from memsync.search.snippets import explain, nearest_lines, snippet
from memsync.vectors import window_cosines


def _nearest_lines(
    candidate: Candidate, query: np.ndarray | None, blob: bytes
) -> tuple[int, int] | None:
    """nearest_lines of the candidate whose windows (`blob`) the vector leg scored against
    `query` (None: no vector leg)."""
    scored = None if query is None else window_cosines(blob, query)
    return nearest_lines(replace(candidate, window_cosines=scored))


def _c(
    i: int, v: float | None, t: float | None, path: str = "", exact: bool = False, text: str = ""
) -> Candidate:
    return Candidate(i, path or f"n{i}.md", 1, 2, text or f"text {i}", v, t, exact)


def test_weighted_fusion_normalises_weights_and_counts_a_missing_leg_as_zero() -> None:
    scored = dict(
        (c.id, s) for c, s in fuse([_c(1, 1.0, None), _c(2, None, 1.0), _c(3, 0.5, 0.5)], Options())
    )
    assert scored == pytest.approx({1: 0.7, 2: 0.3, 3: 0.5})
    weights = Options(vector_weight=2, text_weight=2)
    assert dict((c.id, s) for c, s in fuse([_c(1, 1.0, None)], weights))[1] == pytest.approx(0.5)
    keyword = dict((c.id, s) for c, s in fuse([_c(2, None, 0.8)], Options(mode="keyword")))
    assert keyword[2] == pytest.approx(0.8)


def test_an_exact_identifier_match_found_only_by_keywords_survives_the_threshold_and_leads() -> (
    None
):
    candidates = [_c(1, 0.9, None), _c(2, None, 0.6, exact=True), _c(3, None, 0.9)]
    ranked = rank(candidates, Options())
    assert [c.id for c, _, _ in ranked] == [2, 1]  # 3 (keyword-only, not exact) stays under 0.35


def test_a_chunk_waiting_for_its_vector_is_scored_by_its_words_alone() -> None:
    waiting = replace(_c(3, None, 0.9), waiting=True)
    ranked = rank([_c(1, 0.9, None), waiting], Options())
    assert [(c.id, s) for c, s, _ in ranked] == [(3, pytest.approx(0.9)), (1, pytest.approx(0.63))]
    assert rank([waiting], Options(mode="vector")) == []  # asked for vectors only


def test_exact_matches_are_ordered_by_the_vectors_when_only_they_run() -> None:
    candidates = [_c(1, 0.3, None, "a.md", exact=True), _c(2, 0.8, None, "b.md", exact=True)]
    assert [c.id for c, _ in fuse(candidates, Options(mode="vector"))] == [2, 1]
    by_keywords = [_c(1, 0.3, 0.9, "a.md", exact=True), _c(2, 0.8, 0.2, "b.md", exact=True)]
    assert [c.id for c, _ in fuse(by_keywords, Options(mode="hybrid"))] == [1, 2]


def test_identifiers_and_exact_matching() -> None:
    assert identifiers("what is OPS-1432 about") == ["ops-1432"]
    assert identifiers("ssh port 2222 on pg-main-2") == ["2222", "pg-main-2"]
    assert identifiers("how do I reset the vpn") == []
    assert is_exact("Ticket OPS-1432 tracks it", ["ops-1432"])
    assert not is_exact("Ticket OPS-14321 tracks it", ["ops-1432"])
    assert not is_exact("port 22222", ["2222"])


def test_rrf_scores_rank_positions() -> None:
    candidates = [_c(1, 0.9, 0.1), _c(2, 0.5, 0.9), _c(3, 0.1, None)]
    scored = dict((c.id, s) for c, s in fuse(candidates, Options(mode="rrf")))
    assert scored[1] == pytest.approx((1 / 61 + 1 / 62) / (2 / 61))
    assert scored[3] < scored[2]


def test_rrf_ranks_count_notes_not_a_notes_own_chunks() -> None:
    # a note's second chunk does not push the next note down a rank
    first, its_second = _c(1, 0.9, 0.5, path="a.md"), _c(2, 0.8, None, path="a.md")
    other, found_by_keyword = _c(3, 0.75, None, path="c.md"), _c(4, 0.7, 0.9, path="b.md")
    scored = dict(
        (c.id, s)
        for c, s in fuse([first, its_second, other, found_by_keyword], Options(mode="rrf"))
    )
    assert scored[2] == pytest.approx((1 / 61) / (2 / 61))  # second only to its own note
    assert scored[4] == pytest.approx((1 / 63 + 1 / 61) / (2 / 61))  # behind a.md and c.md


def test_rrf_ties_are_ordered_by_the_weighted_score_not_the_path() -> None:
    # first and second by vectors against second and first by keywords: the same RRF score
    october = _c(1, 0.6, 1.0, path="daily/2026-10-02.md")
    november = _c(2, 0.9, 0.5, path="daily/2026-11-20.md")
    fused = fuse([october, november], Options(mode="rrf"))
    assert fused[0][1] == pytest.approx(fused[1][1])
    assert [c.id for c, _ in fused] == [2, 1]


def test_calibration_is_relative_to_the_query_background() -> None:
    rng = np.random.default_rng(0)
    e5_like = rng.normal(0.8, 0.02, 500)
    other = rng.normal(0.1, 0.05, 500)
    high_e5 = calibrate_cosine(np.array([0.8 + 4 * 0.02]), e5_like)[0]
    high_other = calibrate_cosine(np.array([0.1 + 4 * 0.05]), other)[0]
    assert high_e5 == pytest.approx(high_other, abs=0.05) and high_e5 > 0.75
    assert calibrate_cosine(np.array([0.8]), e5_like)[0] < 0.15  # an average cosine means little


def test_decay_dates_and_factors() -> None:
    today = date(2026, 11, 29)
    assert note_date("daily/2026-10-30.md") == date(2026, 10, 30)
    assert note_date("memory/2026-10-30.md") == date(2026, 10, 30)
    assert note_date("journal/2026-10-30.md") is None
    assert note_date("daily/2026-13-40.md") is None
    assert decay_factor("daily/2026-10-30.md", today, 30) == pytest.approx(0.5)
    assert decay_factor("MEMORY.md", today, 30) == 1.0
    assert decay_factor("projects/heron.md", today, 30) == 1.0
    assert decay_factor("daily/2027-01-01.md", today, 30) == 1.0
    assert decay_factor("daily/2026-11-29.md", today, 30) == pytest.approx(1.0)
    assert decay_factor("daily/2025-11-29.md", today, 30) == pytest.approx(
        math.exp(-math.log(2) / 30 * 365)
    )


def test_decay_reorders_but_the_threshold_sees_the_undecayed_score() -> None:
    old = _c(1, 0.9, 0.9, path="daily/2025-01-01.md")
    new = _c(2, 0.6, 0.6, path="daily/2026-11-28.md")
    options = Options(decay=True, today=date(2026, 11, 29))
    ranked = rank([old, new], options)
    assert [c.id for c, _, _ in ranked] == [2, 1]  # old ranks lower, but is still there
    assert ranked[1][2] == pytest.approx(0.9) and ranked[1][1] < 0.1


def _lines(first: int, last: int) -> str:
    return "\n".join(f"line {i}" for i in range(first, last + 1))


def test_overlapping_chunks_of_one_note_show_each_line_once() -> None:
    """A chunk overlapping a better one of its note is listed with its other lines only, at
    OVERLAP x its score: in chat the answer is often the turn just past the better chunk."""
    a = Candidate(1, "a.md", 1, 10, _lines(1, 10), 0.9, 0.9)
    b = Candidate(2, "a.md", 8, 20, _lines(8, 20), 0.8, 0.8)
    c = Candidate(3, "a.md", 21, 30, _lines(21, 30), 0.7, 0.7)
    inside = Candidate(4, "a.md", 2, 9, _lines(2, 9), 0.85, 0.85)  # no line of its own left
    factors: dict[int, float] = {}
    ranked = rank([a, b, c, inside], Options(), repeats=factors)
    assert [(x.id, x.start_line, x.end_line) for x, _, _ in ranked] == [
        (1, 1, 10),
        (3, 21, 30),
        (2, 11, 20),
    ]
    assert ranked[2][0].text == _lines(11, 20)
    assert factors[2] == pytest.approx(REPEAT * OVERLAP) and ranked[2][1] == pytest.approx(
        0.8 * REPEAT * OVERLAP
    )
    assert factors[3] == pytest.approx(REPEAT**2)  # no overlap: the note's third result
    # MMR asks for diverse results: the rest of a listed chunk is dropped
    assert [x.id for x, _, _ in rank([a, b, c, inside], Options(mmr=True))] == [1, 3]
    # between two listed chunks: the lines between them; pieces of one long line: dropped
    middle = Candidate(5, "b.md", 5, 15, _lines(5, 15), 0.6, 0.6)
    left = Candidate(6, "b.md", 1, 6, _lines(1, 6), 0.9, 0.9)
    right = Candidate(7, "b.md", 14, 20, _lines(14, 20), 0.8, 0.8)
    piece = Candidate(8, "b.md", 19, 22, "the end of a long line\nand one", 0.5, 0.5)
    cut = {
        x.id: (x.start_line, x.end_line)
        for x, _, _ in rank([middle, left, right, piece], Options())
    }
    assert cut == {6: (1, 6), 7: (14, 20), 5: (7, 13)}


def test_mmr_prefers_a_different_note_over_a_near_duplicate() -> None:
    a = _c(1, 0.9, 0.9, text="postgres replication lag runbook")
    b = _c(2, 0.88, 0.88, text="postgres replication lag runbook copy")
    c = _c(3, 0.8, 0.8, text="garden shed roof sheets")
    picked = mmr([(a, 0.9), (b, 0.88), (c, 0.8)], 0.7, 2)
    assert [x.id for x, _ in picked] == [1, 3]
    assert jaccard({"a", "b"}, {"a", "b"}) == 1.0 and jaccard({"a"}, {"b"}) == 0.0


def test_snippet_shows_the_best_matching_lines_not_the_first() -> None:
    text = "\n".join(
        [f"filler line {i}" for i in range(20)] + ["the ssh port is 2222"] + ["tail"] * 5
    )
    lines, first = snippet(text, query_words("ssh port"), start_line=100)
    assert "the ssh port is 2222" in lines
    assert 100 + 18 <= first <= 100 + 20
    assert len(lines.split("\n")) <= 3


def test_a_snippet_shows_the_window_nearest_the_question_when_no_word_matches() -> None:
    text = "\n".join(f"- item {i}" for i in range(30))
    assert snippet(text, [], start_line=1)[1] == 1  # nothing to go by: the first lines
    lines, first = snippet(text, [], start_line=1, focus=(12, 16))
    assert first == 13 and lines.startswith("- item 12")
    # a word of the question still counts for more than the window
    assert "- item 25" in snippet(text, ["item 25"], start_line=1, focus=(12, 16))[0]


def test_the_lines_shown_are_the_nearest_window_s_even_when_the_whole_note_scored() -> None:
    """A short note's whole vector may be nearest the question (it scores the chunk); the lines
    to show are still its nearest window's."""
    e = np.eye(4, dtype="<f4")
    windows = [e[1], 0.8 * e[0] + 0.6 * e[2], e[3]]
    whole = e[0]
    blob = np.array([*windows, whole], dtype="<f4").tobytes()
    chunk = replace(
        _c(1, 0.5, None, text="\n".join(f"line {i}" for i in range(9))),
        window_lines="0-3 3-6 6-9",
    )
    assert _nearest_lines(chunk, e[0], blob) == (3, 6)
    assert _nearest_lines(chunk, e[3], blob) == (6, 9)
    assert _nearest_lines(replace(chunk, window_lines=None), e[0], blob) is None  # not recorded
    assert _nearest_lines(chunk, None, blob) is None  # no vector leg


def test_a_chunk_cut_to_its_unlisted_lines_shows_its_nearest_window_among_them() -> None:
    """A chunk overlapping a listed one of its note keeps its other lines; its windows' lines
    were counted from where it started, so `--explain` named lines past the note's end (12-15
    shown, `nearest window: lines 20-21`) and the snippet leaned on the wrong lines."""
    e = np.eye(4, dtype="<f4")
    text = "\n".join(f"line {n}" for n in range(6, 16))  # lines 6-15 of the note
    blob = np.array([e[0], e[1], e[2]], dtype="<f4").tobytes()
    later = replace(
        _c(2, 0.5, None, path="a.md", text=text),
        start_line=6,
        end_line=15,
        window_lines="0-4 4-8 8-10",  # lines 6-9, 10-13, 14-15
    )
    first = replace(_c(1, 0.9, None, path="a.md"), start_line=1, end_line=11)
    cut = spread_notes([(first, 0.9, 0.9), (later, 0.5, 0.5)])[1][0]
    assert (cut.start_line, cut.end_line) == (12, 15) and cut.window_lines == "0-0 0-2 2-4"
    assert _nearest_lines(cut, e[2], blob) == (2, 4)  # lines 14-15
    assert explain(cut, 0.3, 0.5, {}, {}, (2, 4))["nearest_window"] == [14, 15]
    # the nearest window is cut away (the result above shows it): words alone choose
    assert _nearest_lines(cut, e[0] + 0.1 * e[1], blob) is None
    assert cut_window_lines("0-4 4-8 8-10", 6, 10) == "0-0 0-2 2-4"
    assert cut_window_lines("0-4 4-8 8-10", 0, 5) == "0-4 4-5 5-5"


def test_a_snippet_word_on_every_line_tells_none_of_them_apart() -> None:
    chat = [f"- **Melanie:** line {i} about the weather" for i in range(10)]
    chat[6] = "- **Melanie:** I signed up for a pottery class"
    lines, first = snippet("\n".join(chat), query_words("what class did Melanie take"), 1)
    assert "pottery class" in lines and first in (5, 6, 7)


def test_a_snippet_shows_the_match_with_content_not_front_matter() -> None:
    text = "---\nstatus: active\ntags: [sync]\n---\n# Project Heron\n\nOffline-first sync.\nMore."
    lines, first = snippet(text, query_words("heron"), start_line=1)
    assert (first, lines) == (5, "# Project Heron\n\nOffline-first sync.")
    # further down a note, the same lines are content like any other
    assert snippet(text, query_words("heron"), start_line=40)[1] == 42


def test_text_calibration_is_bm25_floored_by_the_share_of_terms_found() -> None:
    from memsync.search.calibration import calibrate_bm25, coverage

    assert coverage("Replications running all night", ["replication", "run"]) == 1.0
    assert coverage("nothing here", ["replication", "run"]) == 0.0
    assert coverage("the ops 1432 ticket", ["ops 1432", "lag"]) == 0.5
    # a small vault: BM25 is ~0 for everything, the share of terms decides (every term: lifted)
    small = calibrate_bm25({1: -1e-6, 2: -1e-6}, {1: 1.0, 2: 0.5})
    assert small == pytest.approx({1: 0.3 + 0.7 * 0.5, 2: 0.25}, abs=1e-5)
    # a large one: the best gets (-r)/(1-r), the rest keep BM25's proportions
    large = calibrate_bm25({1: -20.0, 2: -10.0, 3: -2.0}, {1: 0.5, 2: 0.5, 3: 0.2})
    assert large[1] == pytest.approx(20 / 21)
    assert large[2] == pytest.approx(20 / 21 / 2)
    assert large[3] == pytest.approx(max(20 / 21 / 10, 0.1))
    assert calibrate_bm25({}, {}) == {}
    # a long chunk holding every word of the question, at a fifth of the best BM25, is lifted
    # above one holding half of them at three times its BM25; the order among each kind stays
    lifted = calibrate_bm25({1: -20.0, 2: -4.0, 3: -12.0, 4: -2.0}, {1: 1, 2: 1, 3: 0.5, 4: 1})
    assert lifted[1] > lifted[2] > lifted[3] and lifted[2] >= lifted[4]
    assert lifted[2] == pytest.approx(0.3 + 0.7 * max(20 / 21 / 5, 0.5))
    assert lifted[1] <= 1.0


def test_a_note_the_query_names_is_lifted_on_the_keyword_leg() -> None:
    from memsync.search.calibration import NAMED, calibrate_bm25, named

    assert named("projects/heron.md", ["heron"])
    assert named("people/li-wei.md", ["li", "wei"]) and named("daily/2026-10-02.md", ["2026 10 02"])
    assert named("笔记/周末计划.md", ["周末", "计划"])
    assert named("tech/postgres-replication.md", ["postgres", "replications"])
    assert not named("notes/heartbeat.md", ["art"])  # words, not substrings
    assert not named("projects/garden-shed.md", ["garden", "shed", "budget"])  # every term
    assert not named("projects/heron.md", [])
    # two short mentions outrank the long note the query names, until it is lifted
    plain = calibrate_bm25({1: -4.4, 2: -3.6}, {1: 1.0, 2: 1.0})
    lifted = calibrate_bm25({1: -4.4, 2: -3.6}, {1: 1.0, 2: 1.0}, named={2})
    assert plain[1] > plain[2] and lifted[1] == plain[1]
    assert lifted[2] == pytest.approx(NAMED + (1 - NAMED) * plain[2]) and lifted[2] > lifted[1]


def test_a_number_shared_by_chance_is_no_exact_match() -> None:
    from memsync.search.calibration import is_exact
    from memsync.search.query import other_terms

    query = "ssh port 2222"
    idents = identifiers(query)
    others = other_terms(query, idents)
    assert idents == ["2222"] and others == ["ssh", "port"]
    assert not is_exact("lab log: sample RBC count 2222 at 09:00", idents, others)
    assert is_exact("The test server's SSH port is 2222.", idents, others)
    assert not is_exact("the port is 2222", idents, others)  # one of two other words: not most
    assert is_exact("OPS-1432 tracks the lag", ["ops-1432"], other_terms("OPS-1432", ["ops-1432"]))
    lone = identifiers("2222")
    assert is_exact("count 2222", lone, other_terms("2222", lone))  # the number is the question


def test_mmr_collapses_near_duplicates_so_a_distinct_note_makes_the_top_3() -> None:
    body = "postgres replication lag runbook: check the replica, restart the slot"
    copies = [_c(i, 0.9, 0.9, text=body + " " * i) for i in range(1, 5)]
    other = _c(9, 0.55, 0.55, text="garden shed roof needs new sheets before winter")
    third = _c(10, 0.5, 0.5, text="replication slot names live in the ops wiki")
    ranked = [(c, 0.9 - c.id * 0.001) for c in copies] + [(other, 0.55), (third, 0.5)]
    picked = [c.id for c, _ in mmr(ranked, 0.7, 3)]
    assert picked[0] == 1 and set(picked[1:]) == {9, 10}
    assert [c.id for c, _, _ in rank([*copies, other, third], Options(mmr=True, limit=3))][0] == 1


def test_mmr_drops_a_copied_notes_chunk_that_starts_a_line_later() -> None:
    # the copy's chunk holds one line fewer than the original's: Jaccard 0.8, but every word of
    # it is in the original's chunk; two chunks of one note overlap so by design and both stay
    lines = ["heron dashboards live in grafana", "alert owners rotate weekly", "slo burn rate"]
    original = _c(1, 0.9, 0.9, path="projects/obs.md", text=" ".join(["budget review", *lines]))
    copy = _c(2, 0.88, 0.88, path="copies/obs.md", text=" ".join(lines))
    other = _c(3, 0.5, 0.5, path="garden.md", text="garden shed roof sheets")
    assert [c.id for c, _ in mmr([(original, 0.9), (copy, 0.88), (other, 0.5)], 0.9, 2)] == [1, 3]
    same_note = replace(copy, path="projects/obs.md")
    picked = mmr([(original, 0.9), (same_note, 0.88), (other, 0.5)], 0.9, 2)
    assert [c.id for c, _ in picked] == [1, 2]


def test_mmr_counts_a_notes_other_chunks_and_a_copys_as_that_note() -> None:
    # a sync conflict's copy of the Heron note: its first section is dropped as a copy, and its
    # second section, in other words than the first, is no more news than the original's would be
    first = "heron keeps sqlite on the device and postgres 16 on the server"
    original = _c(1, 0.9, 0.9, path="projects/heron.md", text=first)
    copied = _c(2, 0.9, 0.9, path="projects/heron (conflict).md", text=first)
    second = _c(3, 0.7, 0.7, path="projects/heron (conflict).md", text="maya designs banners")
    person = _c(4, 0.62, 0.62, path="people/maya.md", text="maya chen, product designer")
    ranked = [(original, 0.9), (copied, 0.89), (second, 0.7), (person, 0.62)]
    assert [c.id for c, _ in mmr(ranked, 0.7, 2)] == [1, 4]
    # the same for the note's own second section
    own = replace(second, path="projects/heron.md")
    assert [c.id for c, _ in mmr([(original, 0.9), (own, 0.7), (person, 0.62)], 0.7, 2)] == [1, 4]
    # and an unrelated note's second section is judged by its words alone
    other = replace(second, path="projects/kestrel.md")
    picked = mmr([(original, 0.9), (other, 0.7), (person, 0.62)], 0.7, 2)
    assert [c.id for c, _ in picked] == [1, 3]


def _notes(script: str, count: int, notes: int | None = None) -> list[tuple[str, str]]:
    """A sample's sampled_from: `count` chunks of one script, from `notes` notes (one each)."""
    return [(script, f"{script}-{i % (notes or count)}.md") for i in range(count)]


def test_a_cosine_is_judged_among_chunks_of_its_own_script() -> None:
    """An English question sits nearer every English chunk: a Chinese chunk that stands out
    among Chinese ones is a strong match, though its cosine is below the English average."""
    rng = np.random.default_rng(0)
    for chinese in (12, 250):  # a few Chinese notes among English ones, or as many
        background = np.r_[rng.normal(0.80, 0.01, 500 - chinese), rng.normal(0.70, 0.01, chinese)]
        sampled_from = _notes("latin", 500 - chinese) + _notes("cjk", chinese)
        cosines = np.array([0.80, 0.74])  # an average English chunk, an outstanding Chinese one
        plain = calibrate_cosine(cosines, background)
        by_script = calibrate_by_script(
            cosines, ["latin", "cjk"], background, sampled_from, "latin"
        )
        assert plain[1] < plain[0] and by_script[1] > 0.6 and by_script[0] < 0.15, chinese
    # too few of a script to judge by: measured as the whole sample is
    few = calibrate_by_script(
        cosines, ["latin", "cjk"], background[:205], sampled_from[:205], "cjk"
    )
    assert few == pytest.approx(calibrate_cosine(cosines, background[:205], [2.0, 1.25]))


def test_across_scripts_the_same_standing_counts_less() -> None:
    """A short Chinese title lands near English pages on nothing they share: across scripts the
    vector leg's scores are spread less, so the glossed keyword leg orders what they barely tell
    apart, while a chunk in the question's own script keeps the steeper curve."""
    rng = np.random.default_rng(3)
    background = np.r_[rng.normal(0.80, 0.02, 300), rng.normal(0.70, 0.02, 300)]
    sampled_from = _notes("latin", 300) + _notes("cjk", 300)
    # a strong and a weak chunk of each script, at the same standing among their own script
    cosines = np.array([0.88, 0.78, 0.78, 0.68])
    scripts = ["latin", "latin", "cjk", "cjk"]
    asked_in_english = calibrate_by_script(cosines, scripts, background, sampled_from, "latin")
    asked_in_chinese = calibrate_by_script(cosines, scripts, background, sampled_from, "cjk")
    assert asked_in_english[:2] == pytest.approx(asked_in_chinese[2:], abs=0.01)  # own script
    assert asked_in_english[2:] == pytest.approx(asked_in_chinese[:2], abs=0.01)  # other script
    own_gap = asked_in_english[0] - asked_in_english[1]
    other_gap = asked_in_english[2] - asked_in_english[3]
    assert 0 < other_gap < own_gap * 0.8
    assert asked_in_english[2] < asked_in_english[0] and asked_in_english[3] > asked_in_english[1]


def test_a_script_seen_in_one_long_note_is_not_moved_by_that_notes_own_mean() -> None:
    """An English vault with one long Chinese note, asked in Chinese about it: its sampled
    chunks are near the question for what they say, not only for their language. Moved by
    their own mean they scored as average chunks, and the note dropped below the threshold."""
    rng = np.random.default_rng(2)
    background = np.r_[rng.normal(0.78, 0.02, 200), rng.normal(0.88, 0.01, 56)]
    cosines = np.array([0.89, 0.80])  # the long note's best chunk, a good English one
    one_note = calibrate_by_script(
        cosines,
        ["cjk", "latin"],
        background,
        _notes("latin", 200) + _notes("cjk", 56, notes=1),
        "cjk",
    )
    assert one_note[0] > one_note[1]  # before: both as in `many`, the note's chunk below
    # the same chunks from many Chinese notes: the language's own leaning, taken out
    many = calibrate_by_script(
        cosines, ["cjk", "latin"], background, _notes("latin", 200) + _notes("cjk", 56), "cjk"
    )
    assert many[0] < many[1] and many[0] < one_note[0] / 2


def test_a_chunk_in_another_script_than_the_query_is_scored_by_its_vector_leg_alone() -> None:
    """No keyword of an English question can match a Chinese note: its missing keyword score
    is no evidence against it, while an English chunk's is."""
    from memsync.search.options import Options

    english = Candidate(1, "a.md", 1, 2, "garden notes", vector_score=0.6, text_score=None)
    chinese = Candidate(
        2,
        "b.md",
        1,
        2,
        "花园棚子的预算",
        vector_score=0.6,
        text_score=None,
        other_script=True,
        out_of_reach=True,
    )
    matched = Candidate(5, "e.md", 1, 2, "garden shed budget", vector_score=0.5, text_score=0.8)
    fused = dict((c.id, s) for c, s in fuse([english, chinese, matched], Options()))
    assert fused[1] == pytest.approx(0.7 * 0.6) and fused[2] == pytest.approx(0.6)
    # a keyword leg that found nothing tells nothing against any chunk: no chunk is lifted
    fused = dict((c.id, s) for c, s in fuse([english, chinese], Options()))
    assert fused[1] == fused[2] == pytest.approx(0.7 * 0.6)
    # found by the few words it shares with the question: the keyword leg may add, never take
    # away (before, a larger pool that reached it ranked it lower: `-n 6` below `-n 2`)
    weakly = Candidate(3, "c.md", 1, 2, "SSH 端口", 0.6, 0.5, other_script=True, out_of_reach=True)
    strongly = Candidate(
        4, "d.md", 1, 2, "SSH 端口", 0.6, 0.9, other_script=True, out_of_reach=True
    )
    fused = dict((c.id, s) for c, s in fuse([weakly, strongly], Options()))
    assert fused[3] == pytest.approx(0.6) and fused[4] == pytest.approx(0.7 * 0.6 + 0.3 * 0.9)


def test_at_an_equal_score_the_question_s_own_words_come_before_their_glosses() -> None:
    """`端口`: the Chinese note saying 端口 and the English one saying `port` (its gloss) tie at
    the every-term floor in a small vault; the path ("tech/" < "笔记/") used to decide."""
    glossed = Candidate(
        1, "tech/redis.md", 1, 2, "port 6380", None, 0.65, other_script=True, glossed=True
    )
    own = Candidate(2, "笔记/测试服务器.md", 1, 2, "SSH端口是2222", None, 0.65)
    for mode in ("keyword", "rrf"):
        ranked = [c.id for c, _ in fuse([glossed, own], Options(mode=mode))]
        assert ranked == [2, 1], mode


def test_in_rrf_a_chunk_in_another_script_counts_its_vector_rank_for_both_legs() -> None:
    from memsync.search.options import Options

    chinese = Candidate(
        1,
        "b.md",
        1,
        2,
        "花园棚子",
        vector_score=0.9,
        text_score=None,
        other_script=True,
        out_of_reach=True,
    )
    english = Candidate(2, "a.md", 1, 2, "garden shed", vector_score=0.8, text_score=0.5)
    unmatched = Candidate(3, "c.md", 1, 2, "garden", vector_score=0.7, text_score=None)
    fused = dict((c.id, s) for c, s in fuse([chinese, english, unmatched], Options(mode="rrf")))
    assert fused[1] == pytest.approx(1.0)  # first of the vector leg, as if first of both
    assert fused[2] == pytest.approx((1 / 62 + 1 / 61) / (2 / 61))
    assert fused[3] == pytest.approx((1 / 63) / (2 / 61))  # no keyword match: one leg only
    # found by the keyword leg far down: its vector rank still counts for both
    weakly = Candidate(
        4,
        "d.md",
        1,
        2,
        "花园 shed",
        vector_score=0.95,
        text_score=0.1,
        other_script=True,
        out_of_reach=True,
    )
    ranked = dict((c.id, s) for c, s in fuse([weakly, english], Options(mode="rrf")))
    assert ranked[4] == pytest.approx(1.0)
    # a keyword leg that found nothing: every chunk by its vector rank alone
    alone = dict((c.id, s) for c, s in fuse([chinese, unmatched], Options(mode="rrf")))
    assert alone[1] == pytest.approx((1 / 61) / (2 / 61))


def test_the_vector_pool_reaches_as_far_as_the_scripts_means_may_move_a_cosine() -> None:
    from memsync.search.cosines import script_shift_range

    rng = np.random.default_rng(1)
    english = rng.normal(0.80, 0.01, 200)
    assert script_shift_range(english, _notes("latin", 200)) == 0.0
    mixed = np.r_[english, rng.normal(0.70, 0.01, 20)]
    reach = script_shift_range(mixed, _notes("latin", 200) + _notes("cjk", 20))
    assert reach == pytest.approx(mixed[:200].mean() - mixed[200:].mean())
    # a script sampled from too few notes is measured with the whole sample: no own mean
    few = script_shift_range(mixed[:203], _notes("latin", 200) + _notes("cjk", 3))
    assert few == pytest.approx(mixed[:200].mean() - mixed[:203].mean())
    three = script_shift_range(mixed, _notes("latin", 200) + _notes("cjk", 20, notes=3))
    assert three == pytest.approx(mixed[:200].mean() - mixed.mean())
