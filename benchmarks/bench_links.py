"""Links: resolution checked on a real linked vault, and what links cost; prints Markdown tables.

    python -m benchmarks.bench_links [--obsidian-help PATH] [--notes 10000] [--runs 3]
    python -m benchmarks.bench_links --hostile [--megabytes 1] [--served-notes 4]

With --obsidian-help (a checkout of github.com/obsidianmd/obsidian-help): its English pages are
indexed keyword-only and every wikilink and Markdown link to a note is resolved twice, by memsync
and by an independent resolver written here from Obsidian's help (a simpler parser, the rules
spelled out again); the share each resolves, the links where they differ, the unresolved links
found and a sample to look at by hand. Then questions: each page's aliases, and each page's file
name, as keyword and hybrid queries, and how often the page comes first.

On a generated vault of --notes notes, each linking to a few others by name, by path and to
headings: a first keyword-only index with links against the same without them (link parsing and
resolution disabled), --runs times in turn, the median of each; `links NOTE` in-process on the
most linked-to note; and under a real watcher, a rename: the time until its backlinks follow it.

With --hostile: notes of --megabytes of each hostile shape (a long run of backticks, `[` then
many `\\[`, a heading of spaces, ...), each read by the link parser, the headings, metadata and
the chunker: seconds per MB of each against plain words. Then a real `memsync serve VAULT` is
given --served-notes such notes at once, and /api/status is asked every 50 ms while it indexes
them: how long the slowest answer took, and how long indexing took.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock
from urllib.parse import unquote

import httpx2

from benchmarks.bench_http import Served
from benchmarks.bench_watch import start_watcher
from benchmarks.common import MEMSYNC, WORDS, fresh_home, keep_option, timed, workspace
from memsync import chunking, metadata
from memsync.config import Config, load_config
from memsync.links import sections
from memsync.links.parse import links_in
from memsync.memory import Memory, search_options
from memsync.store.sqlite_store import SqliteStore
from memsync.sync.syncer import index_vault

# --- an independent resolver: Obsidian's rules, written again without memsync's code -----------

_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_WIKI = re.compile(r"(?<!\\)!?\[\[([^\[\]\n]+?)\]\]")
_MD = re.compile(r"!?\[[^\[\]\n]*\]\((<[^<>\n]+>|[^\s()]+)\)")
_FILES = re.compile(r"\.(png|jpe?g|gif|svg|webp|mp4|webm|mov|pdf|mp3|canvas|base)$", re.I)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def independent_links(vault: Path) -> dict[tuple[str, int, str], str | None]:
    """(note, line, link as written) -> the note Obsidian opens, or None."""
    notes = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md"))
    by_path = {_fold(n[:-3]): n for n in notes}
    by_name: dict[str, list[str]] = {}
    for n in notes:
        by_name.setdefault(_fold(posixpath.basename(n)[:-3]), []).append(n)
    found: dict[tuple[str, int, str], str | None] = {}
    for note in notes:
        text = (vault / note).read_text(encoding="utf-8")
        text = _CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for number, line in enumerate(text.split("\n"), 1):
            for m in _WIKI.finditer(line):
                target = m.group(1).replace("\\|", "|").split("|")[0].split("#")[0].strip()
                if _FILES.search(target):
                    continue
                if not target:
                    found[note, number, m.group(0)] = note
                    continue
                bare = target[:-3] if target.lower().endswith(".md") else target
                if "/" in bare:
                    found[note, number, m.group(0)] = by_path.get(_fold(bare))
                    continue
                same = by_name.get(_fold(bare), [])
                here = [s for s in same if posixpath.dirname(s) == posixpath.dirname(note)]
                ordered = sorted(here) or sorted(same, key=lambda s: (len(s), s))
                found[note, number, m.group(0)] = ordered[0] if ordered else None
            for m in _MD.finditer(line):
                raw = m.group(1).strip("<>")
                if re.match(r"^[a-z][a-z0-9+.-]*:", raw, re.I) or raw.startswith("#"):
                    continue
                target = unquote(raw.split("#")[0])
                if _FILES.search(target) or re.search(r"\.(?!md$)\w+$", target):
                    continue
                bare = target[:-3] if target.lower().endswith(".md") else target
                near = posixpath.normpath(posixpath.join(posixpath.dirname(note), bare))
                found[note, number, m.group(0)] = by_path.get(_fold(near)) or by_path.get(
                    _fold(posixpath.normpath(bare.lstrip("/")))
                )
    return found


def check_obsidian_help(checkout: Path, workdir: Path, runs: int) -> None:
    vault = shutil.copytree(checkout / "en", workdir / "obsidian-en")
    db = workdir / "obsidian.sqlite"
    with SqliteStore(db) as store:
        index_vault(store, vault, 10 << 20, None)
        ours = {
            (row.source, row.line, row.written): row.resolved
            for path in sorted(store.file_stats())
            for row in store.outgoing_links(path)
        }
        total, broken = store.link_counts()
    theirs = independent_links(vault)
    both = set(ours) & set(theirs)
    agree = sum(1 for k in both if ours[k] == theirs[k])
    print("### Links on Obsidian's help (English pages)\n")
    print("| measure | memsync | independent |")
    print("|---|---|---|")
    print(f"| links to notes found | {len(ours):,} | {len(theirs):,} |")
    resolved = [sum(v is not None for v in d.values()) for d in (ours, theirs)]
    print(f"| resolved | {resolved[0]:,} ({resolved[0] / max(1, len(ours)):.1%}) | "
          f"{resolved[1]:,} ({resolved[1] / max(1, len(theirs)):.1%}) |")  # fmt: skip
    print(f"| found by both, same note | {agree:,} of {len(both):,} | |")
    print(f"\n`status`: {total:,} links, {broken:,} unresolved.\n")
    for label, keys in (
        ("found by memsync only", sorted(set(ours) - set(theirs))),
        ("found by the independent parser only", sorted(set(theirs) - set(ours))),
        ("resolved differently", sorted(k for k in both if ours[k] != theirs[k])),
        ("unresolved (memsync)", sorted(k for k in ours if ours[k] is None)),
    ):
        print(f"{label}: {len(keys)}")
        for source, line, written in keys[:15]:
            print(f"- {source}:{line} {written} -> {ours.get((source, line, written))} / "
                  f"{theirs.get((source, line, written))}")  # fmt: skip
    print("\nA sample to check by hand (memsync's resolution):")
    for key in random.Random(7).sample(sorted(both), min(12, len(both))):
        print(f"- {key[0]}:{key[1]} {key[2]} -> {ours[key]}")
    plain, linked = first_index_medians(vault, workdir, runs)
    print(f"\nFirst keyword-only index of these pages, without links / with (median of {runs}): "
          f"{plain:.2f} s / {linked:.2f} s ({(linked / plain - 1) * 100:+.1f}%)")  # fmt: skip
    alias_questions(vault, db)


def alias_questions(vault: Path, db: Path) -> None:
    """Each page's aliases, and each page's file name, asked as a keyword query: how often the
    page comes first, with the names of this release and with the file name alone (before)."""
    config = load_config(db=str(db), provider="none")
    with SqliteStore(db) as store:
        pages = sorted(store.file_stats())
        names = store.note_names(pages)
    aliases = [(a, p) for p in pages for kind, a in names.get(p, []) if kind == "alias"]
    aliased = sorted({p for _, p in aliases})
    file_names = [(posixpath.basename(p)[:-3], p) for p in aliased]
    print("\n| questions (keyword, -n 5) | asked | first, file name only | first, every name |")
    print("|---|---|---|---|")
    for label, questions in (("aliases", aliases), ("file names, same pages", file_names)):
        firsts = []
        for names_too in (False, True):
            with Memory.open(config) as memory:
                if not names_too:
                    memory.store.note_names = lambda paths: {}  # type: ignore[method-assign]
                firsts.append(sum(_first(memory, config, q) == page for q, page in questions))
        shares = [f"{n} ({n / max(1, len(questions)):.1%})" for n in firsts]
        print(f"| {label} | {len(questions)} | {shares[0]} | {shares[1]} |")


def _first(memory: Memory, config: Config, question: str) -> str | None:
    answer = memory.search(question, search_options(config, mode="keyword", limit=5))
    return answer.results[0].path if answer.results else None


# --- cost on a generated linked vault ---------------------------------------------------------


def linked_vault(root: Path, notes: int, seed: int = 3) -> Path:
    """`notes` notes in 50 folders, each of one to four paragraphs (as bench_index's) and two
    sections holding four links: two by name (one to a heading), one by path, one Markdown
    link; note 0 is linked to by a tenth of them."""
    rng = random.Random(seed)
    for i in range(notes):
        folder = f"area{i % 50}"
        others = [rng.randrange(notes) for _ in range(4)]
        if i % 10 == 0:
            others[0] = 0
        paragraphs = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40)))
            for _ in range(rng.randint(1, 4))
        ]
        body = (
            f"# Topic {i}\n\nSee [[note{others[0]}]] and [[note{others[1]}#Details]].\n\n"
            + "\n\n".join(paragraphs)
            + f"\n\n## Details\n\nAlso [[area{others[2] % 50}/note{others[2]}]] and "
            f"[more](../area{others[3] % 50}/note{others[3]}.md) about item {i}.\n"
        )
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / f"note{i}.md").write_text(body)
    return root


@contextmanager
def links_disabled() -> Iterator[None]:
    """The index as it was before links: none parsed, none written or resolved."""
    with (
        mock.patch("memsync.sync.syncer.links_in", lambda source, text: []),
        mock.patch("memsync.store.sql_links.LinkTables._write_links", lambda self, notes: None),
        mock.patch("memsync.store.sql_links.LinkTables._links_gone", lambda self, path: None),
    ):
        yield


def first_index_seconds(vault: Path, workdir: Path, with_links: bool, run: int) -> float:
    db = workdir / f"first-{with_links}-{run}.sqlite"
    with SqliteStore(db) as store:
        if with_links:
            seconds, _ = timed(lambda: index_vault(store, vault, 10 << 20, None))
        else:
            with links_disabled():
                seconds, _ = timed(lambda: index_vault(store, vault, 10 << 20, None))
    for leftover in workdir.glob(f"first-{with_links}-{run}.sqlite*"):
        leftover.unlink()
    return seconds


def first_index_medians(vault: Path, workdir: Path, runs: int) -> tuple[float, float]:
    """A first keyword-only index without links and with them, in turn: the median of each."""
    timings: dict[bool, list[float]] = {True: [], False: []}
    for run in range(runs):
        for with_links in (False, True):
            timings[with_links].append(first_index_seconds(vault, workdir, with_links, run))
    return statistics.median(timings[False]), statistics.median(timings[True])


def move_seconds(vault: Path, db: Path) -> tuple[float, int, int]:
    """A note moved to another folder under a real watcher: the time until its backlinks are
    settled (those by name follow it, those by its old path break), and how many did each."""
    watcher, thread = start_watcher(vault, db, None)
    old, new = "area1/note1.md", "area2/note1.md"
    try:
        with SqliteStore(db) as reader:
            before = [row for row in reader.backlinks(old) if row.source != old]
            by_name = {(row.source, row.line) for row in before if "/" not in row.target}
            os.rename(vault / old, vault / new)
            started = time.perf_counter()
            while reader.backlinks(old) or not by_name <= {
                (row.source, row.line) for row in reader.backlinks(new)
            }:
                if time.perf_counter() - started > 60:
                    raise RuntimeError("the backlinks never followed the move")
                time.sleep(0.005)
            return time.perf_counter() - started, len(by_name), len(before) - len(by_name)
    finally:
        watcher.request_stop()
        thread.join()


def cost(notes: int, runs: int, workdir: Path) -> None:
    vault = linked_vault(workdir / "linked", notes)
    plain, linked = first_index_medians(vault, workdir, runs)
    db = workdir / "linked.sqlite"
    with SqliteStore(db) as store:
        index_vault(store, vault, 10 << 20, None)
        total, broken = store.link_counts()
    config = load_config(db=str(db), provider="none")
    with Memory.open(config) as memory:
        memory.links("area0/note0.md")  # opened and warm, as a second call finds it
        answers = [timed(lambda: memory.links("area0/note0.md")) for _ in range(20)]
    links_ms = statistics.median(s for s, _ in answers) * 1000
    backlinks = len(answers[0][1].backlinks)
    moved, followed, broke = move_seconds(vault, db)
    print(f"\n### Links on {notes:,} generated notes ({total:,} links, {broken:,} unresolved)\n")
    print("| measure | value |")
    print("|---|---|")
    print(f"| first keyword-only index, without links / with (median of {runs}) | "
          f"{plain:.2f} s / {linked:.2f} s ({(linked / plain - 1) * 100:+.1f}%) |")  # fmt: skip
    print(f"| `links NOTE` in-process, a note with {backlinks:,} backlinks (median of 20) | "
          f"{links_ms:.1f} ms |")  # fmt: skip
    print(f"| a note moved under `watch` -> its backlinks settled ({followed} by name follow "
          f"it, {broke} by path break; debounce 300 ms) | {moved * 1000:.0f} ms |")  # fmt: skip


# --- hostile notes ----------------------------------------------------------------------------

# name -> (what the note opens with, the unit repeated to its size, what ends its line); each
# note ends in two links, so that the parser reads it all
HOSTILE: dict[str, tuple[str, str, str]] = {
    "backticks": ("", "`", ""),
    "backtick runs `` ` ```": ("", "`` ` ```a", ""),
    "[ then \\[": ("[", "\\[", ""),
    "[": ("", "[", ""),
    "\\[": ("", "\\[", ""),
    "[[": ("", "[[", ""),
    "](": ("", "](", ""),
    "[a](": ("", "[a](", ""),
    "[a](<": ("", "[a](<", ""),
    "[a\\](x) escaped closers": ("", "[a\\](x ", ""),
    "*": ("", "*", ""),
    "_": ("", "_", ""),
    "#": ("", "#", ""),
    "pipes": ("", "|", ""),
    "$": ("", "$", ""),
    "<": ("", "<", ""),
    "spaces": ("", " ", ""),
    "spaces, then a word": ("", " ", "a"),
    "heading of spaces": ("# a", " ", ""),
    "heading of ` #`": ("# a", " #", ""),
    "lines of ```x": ("", "```x\n", ""),
    "lines of [\\[": ("", "[\\[\n", ""),
    "lines ending in ^": ("", "a ^\n", ""),
    "a 1 MB line of words": ("", "lorem ipsum dolor ", ""),
}
SERVED = ("backticks", "[ then \\[", "spaces", "lines of [\\[")  # the notes serve is given, in turn
PLAIN = ("", "The quick brown fox jumps over the lazy dog [[Fox]].\n", "")
READERS = {
    "links": lambda text: links_in("a/note.md", text),
    "headings": sections.headings,
    "metadata": lambda text: metadata.parse("a/note.md", text),
    "chunks": chunking.chunk_text,
}


def hostile_note(shape: tuple[str, str, str], size: int) -> str:
    head, unit, tail = shape
    return head + unit * ((size - len(head)) // len(unit)) + tail + "\n[[a]] [b](c.md)\n"


def read_seconds(read: Callable[[str], object], text: str) -> str:
    started = time.perf_counter()
    try:
        read(text)
    except BaseException as exc:  # noqa: BLE001 - tiktoken's panic is no Exception
        return f"fails: {type(exc).__name__}"
    return f"{time.perf_counter() - started:.3f}"


def hostile_table(megabytes: float) -> None:
    size = int(megabytes * (1 << 20))
    print(f"### Seconds to read a note of {megabytes:g} MB of each shape\n")
    print("| shape | " + " | ".join(READERS) + " |")
    print("|---|" + "---|" * len(READERS))
    for name, shape in [("plain text, a link a line", PLAIN), *HOSTILE.items()]:
        text = hostile_note(shape, size)
        print(f"| {name} | " + " | ".join(read_seconds(r, text) for r in READERS.values()) + " |")


def status_while_indexing(workdir: Path, notes: int, megabytes: float) -> None:
    """A real `memsync serve VAULT`: --served-notes hostile notes dropped in its vault at once,
    /api/status asked every 50 ms until `status` counts them: the slowest answer."""
    vault = workdir / "served"
    (vault / "notes").mkdir(parents=True)
    (vault / "notes" / "start.md").write_text("# Start\n\nSee [[a]].\n")
    home = fresh_home(workdir / "home")
    env = {**os.environ, "MEMSYNC_HOME": str(home), "MEMSYNC_PROVIDER": "none"}
    token = subprocess.run(
        [*MEMSYNC, "token", "add", "bench"], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    served = Served(env, token, [str(vault)], workdir / "serve.log")
    headers = {"Authorization": f"Bearer {token}"}
    shapes = [HOSTILE[name] for name in SERVED]
    try:
        for i in range(notes):
            note = hostile_note(shapes[i % len(shapes)], int(megabytes * (1 << 20)))
            (vault / "notes" / f"hostile{i}.md").write_text(note)
        answers: list[float] = []
        started = time.perf_counter()
        while time.perf_counter() - started < 600:
            asked = time.perf_counter()
            facts = httpx2.get(f"{served.url}/api/status", headers=headers, timeout=600).json()
            answers.append(time.perf_counter() - asked)
            if facts.get("files_indexed", 0) + len(facts.get("skipped", [])) >= notes + 1:
                break
            time.sleep(0.05)
        indexed = time.perf_counter() - started
    finally:
        served.stop()
    print(f"\n### `memsync serve` given {notes} notes of {megabytes:g} MB of hostile shapes\n")
    print("| measure | value |")
    print("|---|---|")
    print(f"| indexed after | {indexed:.1f} s |")
    print(f"| /api/status asked meanwhile | {len(answers)} times |")
    print(f"| /api/status, median / slowest answer | "
          f"{statistics.median(answers) * 1000:.0f} ms / {max(answers) * 1000:.0f} ms |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--obsidian-help", type=Path, help="a checkout of obsidianmd/obsidian-help")
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hostile", action="store_true", help="hostile notes instead")
    parser.add_argument("--megabytes", type=float, default=1.0, help="each hostile note's size")
    parser.add_argument("--served-notes", type=int, default=4, help="hostile notes given to serve")
    keep_option(parser)
    args = parser.parse_args()
    with workspace("memsync-links-", args.keep) as workdir:
        if args.hostile:
            hostile_table(args.megabytes)
            status_while_indexing(workdir, args.served_notes, args.megabytes)
            return
        if args.obsidian_help:
            check_obsidian_help(args.obsidian_help, workdir, args.runs)
        cost(args.notes, args.runs, workdir)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
