from __future__ import annotations

import hashlib
import random
import re
from dataclasses import replace

from memsync.chunking import (
    LEAD_LINES,
    MAX_TOKENS,
    MAX_WINDOWS,
    WHOLE_TOKENS,
    WINDOW_TOKENS,
    Window,
    chunk_text,
    chunk_windows,
    count_tokens,
    embed_input,
    embed_inputs,
    encoded,
    encoding,
    split_lines,
    windows,
)


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
    assert all(
        w.startswith("Project > Risks\n\n")
        for w in embed_inputs(chunks[-1].context, chunks[-1].text)
    )


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


def test_a_chunk_of_chat_is_embedded_as_windows_of_whole_turns() -> None:
    turns = [f"- **Speaker {i % 2}:** turn {i} says something about topic {i}" for i in range(30)]
    chunk = chunk_text("# Chat\n\n" + "\n".join(turns) + "\n")[0]
    found = [w.text for w in windows(chunk.text)]
    assert len(found) > 1
    assert all(sum(count_tokens(line) for line in w.split("\n")) <= WINDOW_TOKENS for w in found)
    # whole lines, in order, every one of them once
    assert [line for w in found for line in w.split("\n") if line] == [
        line for line in chunk.text.split("\n") if line
    ]
    # the heading the chunk opened is in front of every later window
    inputs = embed_inputs(chunk.context, chunk.text)
    assert inputs[0].startswith("# Chat\n")
    assert all(w.startswith("Chat\n\n- **Speaker") for w in inputs[1:])


def test_a_short_note_of_one_chunk_is_also_embedded_whole() -> None:
    """A person's note: its windows hold its facts apart (the team, the RFCs, the tea), and a
    question joining two of them matched a day's one line about one of them better."""
    person = "# Li Wei\n\n" + "\n".join(f"- fact {i}: {'detail ' * 12}" for i in range(8)) + "\n"
    (chunk,) = chunk_text(person)
    assert chunk.whole and len(windows(chunk.text)) > 1
    inputs = embed_inputs(chunk.context, chunk.text, chunk.whole)
    assert len(inputs) == len(windows(chunk.text)) + 1 and inputs[-1] == chunk.text
    assert len(embed_inputs(chunk.context, chunk.text)) == len(windows(chunk.text))
    # a long note's chunks, a note of one window, a note of one chunk longer than WHOLE_TOKENS
    chunks = chunk_text(person * 12)
    assert len(chunks) > 1 and not any(c.whole for c in chunks)
    (short,) = chunk_text("# Note\n\nOne line.\n")
    assert short.whole and len(embed_inputs(short.context, short.text, True)) == 1
    (longer,) = chunk_text("# Log\n\n" + "\n".join(f"- {'entry ' * 20}" for _ in range(12)))
    assert longer.whole and longer.tokens > WHOLE_TOKENS
    assert len(embed_inputs(longer.context, longer.text, True)) == len(windows(longer.text))


def test_a_line_longer_than_a_window_is_a_window_alone_and_blank_runs_are_none() -> None:
    long_line = "word " * 300
    assert [w.text for w in windows(f"short\n{long_line}\n\n\nend")] == ["short", long_line, "end"]
    assert [w.text for w in windows("\n\n")] == ["\n\n"]  # nothing but blanks: the text itself


def test_a_megabyte_of_spaces_before_a_word_is_chunked_whole() -> None:
    """tiktoken panicked on it (a stack overflow, which is no Exception: `index` stopped with a
    traceback); a line under ENCODED_AT_ONCE is counted as before."""
    text = " " * (1 << 20) + "word\n"
    assert chunk_text(text)[-1].text.endswith(" word")
    assert count_tokens(text) > 1_000
    line = "a line of words " * 1_000
    assert encoded(line) == encoding().encode_ordinary(line)


def test_windows_never_exceed_their_numbering() -> None:
    text = "\n".join(["word " * (WINDOW_TOKENS - 2)] * (MAX_WINDOWS + 5))
    found = [w.text for w in windows(text)]
    assert len(found) == MAX_WINDOWS
    assert "\n".join(found) == text


def test_each_window_s_lines_are_known_in_the_order_embedded() -> None:
    """A chunk's nearest window to a question says which of its lines to show."""
    chunks = chunk_text(_paragraphs(40))
    for chunk in chunks:
        lines = chunk.text.split("\n")
        found = chunk_windows(chunk.text, chunk.overlap)
        inputs = embed_inputs(chunk.context, chunk.text, overlap=chunk.overlap)
        assert len(found) == len(inputs)
        for window, embedded in zip(found, inputs):
            assert "\n".join(lines[window.first : window.end]).strip("\n") in embedded
    assert any(
        chunk.overlap and chunk_windows(chunk.text, chunk.overlap)[0].first > 0 for chunk in chunks
    )
    # the windows past MAX_WINDOWS, joined, span from the first of them to the last line
    text = "\n".join(["word " * (WINDOW_TOKENS - 2)] * (MAX_WINDOWS + 5))
    last = chunk_windows(text)[-1]
    assert (last.first, last.end) == (MAX_WINDOWS - 1, MAX_WINDOWS + 5)


def test_a_chunk_of_one_window_hashes_as_its_text_did() -> None:
    """The embedding cache of an index made before windows still serves short chunks."""
    chunk = chunk_text("# Title\n\nA short note.\n")[0]
    assert len(windows(chunk.text)) == 1
    expected = hashlib.sha256(embed_input(chunk.context, chunk.text).encode()).hexdigest()
    assert chunk.hash == expected


def test_a_heading_stays_with_the_lines_after_it() -> None:
    """A title alone would be a vector of its own that every later window repeats in front."""
    abstract = "word " * 150
    assert windows(f"# Title\n\n{abstract}") == [Window("", 0, 3, f"# Title\n\n{abstract}")]
    found = windows(f"# A\n\n{abstract}\n## B\n\n{abstract}")
    assert found == [
        Window("", 0, 3, f"# A\n\n{abstract}"),
        Window("A", 3, 6, f"## B\n\n{abstract}"),
    ]


def test_a_chunk_embeds_its_own_lines_and_one_line_of_the_overlap_before_them() -> None:
    """Each line embedded about once (the whole overlap again was 20-30% more tokens), with the
    turn a reply answers still in front of it."""
    turns = [f"- **Speaker {i % 2}:** turn {i} says something about topic {i}" for i in range(90)]
    chunks = chunk_text("# Chat\n\n" + "\n".join(turns) + "\n")
    assert len(chunks) > 2 and chunks[0].overlap == 0
    assert all(c.overlap > LEAD_LINES for c in chunks[1:])
    embedded = [
        [
            line
            for w in embed_inputs(c.context, c.text, c.whole, c.overlap)
            for line in w.split("\n")
        ]
        for c in chunks
    ]
    for chunk, lines in zip(chunks[1:], embedded[1:]):
        assert lines[:3] == ["Chat", "", chunk.text.split("\n")[chunk.overlap - 1]]  # in front
    said = [line for lines in embedded for line in lines if line.startswith("- ")]
    assert list(dict.fromkeys(said)) == turns and len(said) == len(turns) + len(chunks) - 1
    # what a chunk's hash names is what is embedded, so the cache never serves other windows
    assert chunks[1].hash != replace(chunks[1], overlap=0).hash


def test_a_heading_in_the_overlap_still_leads_and_a_chunk_all_overlap_keeps_its_lines() -> None:
    assert windows("# A\nb\nc", skip=1) == [Window("A", 1, 3, "b\nc")]
    assert embed_inputs("Chat", "## Later\nq\nreply", overlap=2) == ["Chat > Later\n\nq\nreply"]
    # the line in front is one that says something, not the blank line before a paragraph
    assert embed_inputs("", "a\nb\n\nc", overlap=3) == ["b\n\nc"]
    assert windows("a\nb\n\n", skip=2) == [Window("", 0, 4, "a\nb")]


def _mixed_note(rng: random.Random) -> str:
    """Headings, fences, lists, blank runs, CJK and lines longer than a chunk, at random."""
    words = "port 端口 server 服务器 sync vault note 笔记 chunk query cache".split()
    lines: list[str] = []
    for i in range(rng.randint(5, 160)):
        kind = rng.random()
        if kind < 0.08:
            lines.append(f"{'#' * rng.randint(1, 4)} Heading {i}")
        elif kind < 0.12:
            lines += ["```", f"# not a heading {i}", "code", "```"]
        elif kind < 0.25:
            lines += [""] * rng.randint(1, 3)
        elif kind < 0.28:
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(300, 700))))
        else:
            lines.append(f"- {' '.join(rng.choice(words) for _ in range(rng.randint(1, 30)))} {i}")
    return "\n".join(lines)


def test_every_line_a_chunk_holds_of_its_own_is_embedded_by_it() -> None:
    """A chunk's windows leave its overlap to the chunk before: none of its own lines that say
    something may be left out, whatever the note holds (pieces of long lines, fences, blank
    runs); a fence or a rule alone is no window of its own."""
    rng = random.Random(7)
    for _ in range(150):
        for chunk in chunk_text(_mixed_note(rng)):
            inputs = embed_inputs("", chunk.text, chunk.whole, chunk.overlap)
            embedded = {line for text in inputs for line in text.split("\n")}
            own = chunk.text.split("\n")[chunk.overlap :]
            assert all(line in embedded for line in own if re.search(r"[^\W_]", line))
            assert all(re.search(r"[^\W_]", text) for text in inputs)
            assert len(inputs) <= MAX_WINDOWS + 1


def test_a_line_that_says_nothing_is_no_window_of_its_own() -> None:
    """The `---` closing a page's front matter, cut off from it by the window's size, was a
    window alone, and its vector sat near every short question."""
    text = "---\ntitle: one two three four five six seven eight\n---\nThe page itself, at length"
    found = [w.text for w in windows(text, limit=10)]
    # each rule goes with the line after it, as a heading does
    assert found == [
        "---\ntitle: one two three four five six seven eight",
        "---\nThe page itself, at length",
    ]
    # a rule after the last line that fits: in no window
    assert [
        w.text for w in windows("The page itself, at length, once more and again\n***", limit=10)
    ] == ["The page itself, at length, once more and again"]
    assert [w.text for w in windows("---\n***")] == ["---\n***"]  # nothing else: the chunk as it is
