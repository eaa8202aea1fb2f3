from __future__ import annotations

import random

from memsync.chunking import MAX_TOKENS, chunk_text, count_tokens, split_lines


def _paragraphs(n: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    words = "replication server port sync vault note chunk index query model cache token".split()
    out = []
    for i in range(n):
        if i % 7 == 0:
            out.append(f"## Section {i}")
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 40)))
        out.append(f"{sentence} (paragraph {i}).")
        out.append("")
    return "\n".join(out)


def test_every_chunk_fits_the_token_limit() -> None:
    text = _paragraphs(400)
    chunks = chunk_text(text)
    assert len(chunks) > 10
    assert all(count_tokens(c.text) <= MAX_TOKENS for c in chunks)
    assert all(c.tokens <= MAX_TOKENS for c in chunks)


def test_no_line_is_lost_and_line_numbers_match_the_text() -> None:
    text = _paragraphs(300)
    lines = split_lines(text)
    covered: set[int] = set()
    for chunk in chunk_text(text):
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    assert {i + 1 for i, line in enumerate(lines) if line.strip()} <= covered


def test_next_chunk_repeats_about_80_tokens_of_whole_lines() -> None:
    chunks = chunk_text(_paragraphs(300))
    overlaps = 0
    for previous, current in zip(chunks, chunks[1:]):
        assert current.start_line <= previous.end_line + 1
        if current.start_line <= previous.end_line:
            overlaps += 1
            repeated = split_lines(current.text)[: previous.end_line - current.start_line + 1]
            assert count_tokens("\n".join(repeated)) <= 80 + 5
            assert "\n".join(repeated) in previous.text
    assert overlaps > len(chunks) // 2


def test_a_long_line_is_split_into_pieces_that_keep_its_line_number_and_lose_nothing() -> None:
    long_line = " ".join(f"word{i} 端口{i}" for i in range(2000))
    text = f"# Title\n\nshort line\n{long_line}\nafter the long line\n"
    chunks = chunk_text(text)
    pieces = [c for c in chunks if c.start_line <= 4 <= c.end_line]
    assert len(pieces) >= 5
    rebuilt = "".join(c.text.split("\n")[4 - c.start_line] for c in pieces)
    assert rebuilt == long_line  # no piece duplicated, no tail dropped
    assert all(count_tokens(c.text) <= MAX_TOKENS for c in chunks)
    assert any("after the long line" in c.text for c in chunks)


def test_crlf_missing_final_newline_empty_and_blank_files() -> None:
    assert chunk_text("") == []
    assert chunk_text("\n\n   \n") == []
    crlf = chunk_text("# A\r\n\r\nfirst\r\nsecond")
    assert len(crlf) == 1
    assert crlf[0].text == "# A\n\nfirst\nsecond"
    assert (crlf[0].start_line, crlf[0].end_line) == (1, 4)


def test_front_matter_keeps_line_numbers_and_headings_give_context() -> None:
    text = "---\ntags: [a, b]\n---\n# Project\n\n## Risks\n" + "risk line here\n" * 200
    chunks = chunk_text(text)
    assert chunks[0].start_line == 1 and chunks[0].text.startswith("---")
    assert chunks[-1].context == "Project > Risks"
    assert chunks[-1].embed_text.startswith("Project > Risks\n\n")


def test_headings_inside_code_fences_are_not_headings() -> None:
    text = "# Real\n\n```bash\n# just a comment\n```\n" + "text\n" * 300
    assert all("just a comment" not in c.context for c in chunk_text(text))


def test_editing_one_paragraph_of_a_2000_line_note_changes_one_or_two_chunks() -> None:
    text = _paragraphs(1000, seed=3)
    assert len(split_lines(text)) >= 2000
    before = {c.hash for c in chunk_text(text)}
    lines = split_lines(text)
    lines[1001] = lines[1001] + " and one more sentence about the garden shed roof"
    after = [c.hash for c in chunk_text("\n".join(lines))]
    changed = [h for h in after if h not in before]
    assert 1 <= len(changed) <= 2, len(changed)
