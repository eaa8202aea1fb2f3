"""LoCoMo as the field scores retrieval on it (basic-memory's benchmark): one note per session,
every question searched, scored at note level (R@5, MRR@10) and at turn level.

Pure except `read_dataset` and `write_vault`. The data is read from where the caller keeps it and
written into a work folder: never into the repository.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

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
    conversations: Sequence[dict], vault: Path
) -> dict[tuple[int, str], tuple[str, int]]:  # type: ignore[type-arg]
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
    asked: Iterable[Question], runs: dict[str, Sequence[Ranked]]
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
