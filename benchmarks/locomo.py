"""LoCoMo as the field scores retrieval on it (basic-memory's benchmark): one note per session,
every question searched, scored at note level (R@5, MRR@10) and at turn level; prints Markdown
tables.

    python -m benchmarks.locomo --data ../shared/eval/locomo [--modes hybrid,keyword,vector]
        [--check-cli 20] [--workdir DIR]

All conversations in one index built as `memsync index` builds it, each question asked as
`memsync query Q -n 10 --min-score 0 --mode MODE --no-decay --no-mmr --json` asks it (the same
library call, without a process per question; the first --check-cli questions also through a real
process, which must rank them the same). R@5: share of the evidence sessions' notes among the
top-5 chunks' notes; MRR over the top 10; turn@5: a top-5 chunk's line range holds an evidence
turn; lines shown: of the top-5 chunks whose range holds an evidence turn, the share whose snippet
does.

The scoring is pure; `read_dataset`, `write_vault` and the run at the end read and write files.
The data is read from where the caller keeps it (--data) and written into a work folder: never
into the repository.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import MEMSYNC
from memsync import memory
from memsync.config import Config

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Question:
    id: str  # locomo_<conversation index>_qa<n>, as the corrections name it
    text: str
    category: str
    notes: frozenset[str]  # the evidence sessions' notes
    turns: frozenset[tuple[str, int]]  # (note, line) of each evidence turn found in the notes


@dataclass(frozen=True)
class Ranked:
    """One result as `memsync query --json` gives it."""

    path: str
    start_line: int
    end_line: int
    shown: tuple[int, int] = (0, 0)  # the first and last of the lines it shows (its snippet)


def read_dataset(folder: Path) -> tuple[list[dict], dict[str, list[str]]]:  # type: ignore[type-arg]
    """The conversations and the corrected evidence by question id."""
    with gzip.open(folder / "dev.json.gz", "rt", encoding="utf-8") as f:
        conversations = json.load(f)
    corrections_file = folder / "dev-corrections.json.gz"
    corrected: dict[str, list[str]] = {}
    if corrections_file.exists():
        with gzip.open(corrections_file, "rt", encoding="utf-8") as f:
            for fix in json.load(f):
                corrected[fix["question_id"]] = list(fix["correct_evidence"])
    return conversations, corrected


def note_name(conversation: int, session: int) -> str:
    return f"locomo-c{conversation:02d}-s{session:02d}.md"


def sessions(conversation: dict) -> list[tuple[int, str, list[dict]]]:  # type: ignore[type-arg]
    """(number, date, turns) of each session, in order."""
    found = []
    for key, turns in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(turns, list):
            number = int(match.group(1))
            found.append((number, conversation.get(f"session_{number}_date_time", ""), turns))
    return sorted(found)


def session_note(
    conversation: int,
    sample_id: str,
    number: int,
    when: str,
    turns: Sequence[dict],  # type: ignore[type-arg]
) -> tuple[str, dict[str, int]]:
    """The note basic-memory's converter writes for one session, and the line of each turn."""
    name = note_name(conversation, number)
    lines = [
        "---",
        f"title: {json.dumps(f'{name[:-3]} ({when})')}",
        "type: conversation",
        f"conversation_id: {sample_id}",
        f"session_id: {name[:-3]}",
        f"session_number: {number}",
        f"session_date: {json.dumps(when)}",
        "---",
        "",
        f"# Chat session at {when}",
        "",
        "## Conversation",
        "",
    ]
    at: dict[str, int] = {}
    for turn in turns:
        text = " ".join(str(turn.get("text", "")).split())  # one line per turn
        lines.append(f"- **{turn['speaker']}:** {text}")
        at[turn["dia_id"]] = len(lines)
    return "\n".join(lines) + "\n", at


def write_vault(
    conversations: Sequence[dict[str, Any]], vault: Path
) -> dict[tuple[int, str], tuple[str, int]]:
    """Every session as a note in `vault`; returns (conversation, dia_id) -> (note, line)."""
    vault.mkdir(parents=True, exist_ok=True)
    where: dict[tuple[int, str], tuple[str, int]] = {}
    for index, record in enumerate(conversations):
        for number, when, turns in sessions(record["conversation"]):
            text, at = session_note(index, record["sample_id"], number, when, turns)
            name = note_name(index, number)
            path = vault / name
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
            where.update({((index, dia), (name, line)) for dia, line in at.items()})
    return where


def questions(
    conversations: Sequence[dict],  # type: ignore[type-arg]
    corrected: dict[str, list[str]],
    where: dict[tuple[int, str], tuple[str, int]],
) -> list[Question]:
    """Every question with evidence (the corrected key where the audit gives one)."""
    asked = []
    for index, record in enumerate(conversations):
        for n, qa in enumerate(record["qa"]):
            qid = f"locomo_{index}_qa{n}"
            evidence = corrected.get(qid, qa.get("evidence") or [])
            ids = [f"D{s}:{t}" for item in evidence for s, t in _EVIDENCE.findall(str(item))]
            notes = frozenset(note_name(index, int(i[1:].split(":")[0])) for i in ids)
            if not notes:
                continue
            turns = frozenset(where[(index, i)] for i in ids if (index, i) in where)
            asked.append(
                Question(qid, str(qa["question"]), CATEGORIES[qa["category"]], notes, turns)
            )
    return asked


def note_recall(question: Question, ranked: Sequence[Ranked], k: int = 5) -> float:
    """The share of the evidence notes among the top-k results' notes."""
    return len({r.path for r in ranked[:k]} & question.notes) / len(question.notes)


def note_mrr(question: Question, ranked: Sequence[Ranked], k: int = 10) -> float:
    for position, r in enumerate(ranked[:k], start=1):
        if r.path in question.notes:
            return 1.0 / position
    return 0.0


def _holds(question: Question, path: str, first: int, last: int) -> bool:
    """Lines `first` to `last` of the note hold an evidence turn."""
    return any(path == note and first <= line <= last for note, line in question.turns)


def turn_hit(question: Question, ranked: Sequence[Ranked], k: int = 5) -> float:
    """1 when a top-k result's line range holds an evidence turn."""
    return float(any(_holds(question, r.path, r.start_line, r.end_line) for r in ranked[:k]))


def shown_turns(question: Question, ranked: Sequence[Ranked], k: int = 5) -> tuple[int, int]:
    """(top-k results whose line range holds an evidence turn, those of them whose lines shown
    hold one): whether a result shows the turn it was found for."""
    holding = [r for r in ranked[:k] if _holds(question, r.path, r.start_line, r.end_line)]
    return len(holding), sum(_holds(question, r.path, *r.shown) for r in holding)


def scores(
    asked: Iterable[Question], runs: Mapping[str, Sequence[Ranked]]
) -> dict[str, dict[str, float]]:
    """Mean R@5, MRR@10 and turn-level hit@5, overall and per category; and `shown`: of the
    top-5 results whose lines hold an evidence turn, the share whose lines shown hold it."""
    groups: dict[str, list[tuple[float, ...]]] = {}
    for q in asked:
        ranked = runs[q.id]
        row = (note_recall(q, ranked), note_mrr(q, ranked), turn_hit(q, ranked))
        for group in ("all", q.category):
            groups.setdefault(group, []).append((*row, *shown_turns(q, ranked)))
    return {
        group: {
            "r@5": sum(r[0] for r in rows) / len(rows),
            "mrr@10": sum(r[1] for r in rows) / len(rows),
            "turn@5": sum(r[2] for r in rows) / len(rows),
            "shown": sum(r[4] for r in rows) / max(sum(r[3] for r in rows), 1),
            "n": len(rows),
        }
        for group, rows in groups.items()
    }


MODES = ("hybrid", "keyword", "vector")


def top_ten(
    config: Config, vault: Path, asked: list[Question], mode: str
) -> dict[str, list[Ranked]]:
    """Each question's top 10 as `memsync query -n 10 --min-score 0 --no-decay --no-mmr` ranks it."""
    options = memory.search_options(
        config, limit=10, min_score=0.0, mode=mode, decay=False, mmr=False
    )
    with memory.Memory.open(config, vault) as opened:  # as a `memsync query` process opens it
        return {
            q.id: [
                Ranked(
                    h.path,
                    h.start_line,
                    h.end_line,
                    (h.snippet_start, _last_shown(h.snippet_start, h.snippet)),
                )
                for h in opened.search(q.text, options).results
            ]
            for q in asked
        }


def _last_shown(first: int, snippet: str) -> int:
    return first + snippet.count("\n")


def check_cli(
    config: Config, vault: Path, asked: list[Question], runs: dict[str, list[Ranked]]
) -> None:
    """The first questions again through a real `memsync query ... --json` process: the library
    call above must rank exactly as the command a user types."""
    env = {**os.environ, "MEMSYNC_DB": str(config.db)}
    for q in asked:
        done = subprocess.run(
            [*MEMSYNC, "query", q.text, "--vault", str(vault), "-n", "10",
             "--min-score", "0", "--mode", "hybrid", "--no-decay", "--no-mmr", "--json"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        got = [
            Ranked(
                r["path"],
                r["start_line"],
                r["end_line"],
                (r["snippet_start_line"], _last_shown(r["snippet_start_line"], r["snippet"])),
            )
            for r in json.loads(done.stdout)["results"]
        ]
        if got != runs[q.id]:
            raise SystemExit(f"the CLI ranks {q.text!r} otherwise: {got} != {runs[q.id]}")
    print(f"the CLI ranks the first {len(asked)} questions as measured", file=sys.stderr)


def evaluate(path: Path, workdir: Path, modes: list[str], cli_checks: int = 0) -> None:
    conversations, corrected = read_dataset(path)
    vault = workdir / "locomo_vault"
    where = write_vault(conversations, vault)
    asked = questions(conversations, corrected, where)
    config = Config(db=str(workdir / "locomo.sqlite"))
    started = time.monotonic()
    built = memory.index(config, vault)
    print(
        f"index: {built.report.added} new notes, {built.report.chunks_written} chunks written "
        f"in {time.monotonic() - started:.0f}s",
        file=sys.stderr,
    )
    results = {}
    for mode in modes:
        started = time.monotonic()
        runs = top_ten(config, vault, asked, mode)
        results[mode] = scores(asked, runs)
        print(f"{mode}: {time.monotonic() - started:.0f}s", file=sys.stderr)
        if mode == "hybrid" and cli_checks:
            check_cli(config, vault, asked[:cli_checks], runs)
    notes = len(list(vault.glob("*.md")))
    print(
        f"### LoCoMo, development split ({len(conversations)} conversations, {notes} notes, "
        f"{len(asked)} questions, corrected key)\n"
    )
    print("| mode | R@5 | MRR@10 | turn@5 | lines shown |")
    print("|---|---|---|---|---|")
    for mode, by_group in results.items():
        m = by_group["all"]
        print(
            f"| {mode} | {m['r@5']:.3f} | {m['mrr@10']:.3f} | {m['turn@5']:.3f} "
            f"| {m['shown']:.3f} |"
        )
    groups = [g for g in (*CATEGORIES.values(),) if g in results[modes[0]]]
    print("\nR@5 by question kind (questions):\n")
    print("| mode | " + " | ".join(f"{g} ({results[modes[0]][g]['n']:.0f})" for g in groups) + " |")
    print("|---|" + "---|" * len(groups))
    for mode, by_group in results.items():
        print(f"| {mode} | " + " | ".join(f"{by_group[g]['r@5']:.3f}" for g in groups) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo's folder (dev.json.gz)")
    parser.add_argument("--modes", default=",".join(MODES), help="the modes to measure")
    parser.add_argument(
        "--check-cli", type=int, default=20, help="questions re-asked through `memsync query`"
    )
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "memsync-eval")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    evaluate(args.data, args.workdir, args.modes.split(","), args.check_cli)


if __name__ == "__main__":
    main()
