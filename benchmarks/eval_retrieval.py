"""Retrieval quality: Recall@5, MRR@10, nDCG@10 per configuration; prints Markdown tables.

    python -m benchmarks.eval_retrieval --sample                     # labelled queries on sample_vault/
    python -m benchmarks.eval_retrieval --duplicates                 # MMR, with near-copies of notes
    python -m benchmarks.eval_retrieval --scifact ../shared/eval/scifact [--workdir DIR]
    python -m benchmarks.eval_retrieval --sample --postgres pgserver  # also in PostgreSQL, compared
    python -m benchmarks.eval_retrieval --locomo ../shared/eval/locomo  # agent memory (dev split)
    python -m benchmarks.eval_retrieval --obsidian-help PATH  # across scripts, on a real vault

--postgres URL (or `pgserver`: a server started in --workdir) runs --sample on both backends and
compares them query by query.

SciFact: one note per abstract ("# title" then the text), indexed with the local model once into
--workdir (re-runs reuse it); weights are tuned on the train split and reported on the test split.
Only each query's `text` is read. Each claim gets 10 chunks, as `memsync query CLAIM -n 10
--min-score 0` gives them, folded to notes (fewer than 10 when a note gives several chunks).

LoCoMo: benchmarks/locomo.py's run (`python -m benchmarks.locomo --data DIR` alone).

Obsidian's help (PATH: a checkout of github.com/obsidianmd/obsidian-help): its English pages and
their Chinese translations (en/, zh/; a page and its translation share a `permalink`) indexed with
the local model into --workdir. A Chinese page's title, or one of its `## ` headings, written in
Chinese characters only, asks for the English page of the same permalink, searched within en/; an
English page's title or heading of two words or more, for the Chinese page, within zh/ (the Chinese
pages' front matter often holds the English title as an alias). The labels are mechanical: nothing
was written or tuned for them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from pathlib import Path

from benchmarks import locomo
from benchmarks.common import ROOT, SAMPLE_VAULT, start_pgserver
from memsync.embed.local import LocalEmbedder
from memsync.filters import note_filter
from memsync.search.evaluate import distinct, novelty_ndcg_at, score_run
from memsync.search.options import Options
from memsync.search.pipeline import Hit, search
from memsync.store.locate import Location, PostgresLocation, SqliteLocation
from memsync.store.protocols import StoreWriter as Store
from memsync.store.sqlite_store import SqliteStore
from memsync.sync.syncer import index_vault

TODAY = date(2026, 11, 29)  # the sample vault's "now", so decay is reproducible
CONFIGS = {
    "keyword": Options(mode="keyword"),
    "vector": Options(mode="vector"),
    "hybrid 0.7/0.3": Options(mode="hybrid"),
    "hybrid + MMR": Options(mode="hybrid", mmr=True),
    "RRF (k=60)": Options(mode="rrf"),
}


class CachedQueries:
    """Embeds each query once per run, whatever the number of configurations."""

    def __init__(self, embedder: LocalEmbedder) -> None:
        self._embedder = embedder
        self._cache: dict[str, object] = {}
        self.provider, self.model = embedder.provider, embedder.model
        self.key = embedder.key

    def embed_query(self, text: str):  # type: ignore[no-untyped-def]
        if text not in self._cache:
            self._cache[text] = self._embedder.embed_query(text)
        return self._cache[text]

    def describe(self) -> str:
        return self._embedder.describe()


def results(
    store: Store, embedder: object, queries: dict[str, str], options: Options, limit: int = 20
) -> dict[str, list[Hit]]:
    run = replace(options, limit=limit, min_score=0.0, today=TODAY)
    return {
        qid: search(store, text, run, embedder).results  # type: ignore[arg-type]
        for qid, text in queries.items()
    }


def rankings(
    store: Store, embedder: object, queries: dict[str, str], options: Options, limit: int = 20
) -> dict[str, list[str]]:
    found = results(store, embedder, queries, options, limit)
    return {qid: [hit.path for hit in hits] for qid, hits in found.items()}


def table(rows: dict[str, dict[str, float]]) -> str:
    out = ["| configuration | Recall@5 | MRR@10 | nDCG@10 |", "|---|---|---|---|"]
    for name, m in rows.items():
        out.append(f"| {name} | {m['recall@5']:.3f} | {m['mrr@10']:.3f} | {m['ndcg@10']:.3f} |")
    return "\n".join(out)


def build(store: Store, vault: Path, embedder: LocalEmbedder) -> None:
    started = time.monotonic()
    report = index_vault(store, vault, 50 << 20, embedder)
    print(
        f"index: {report.added} new notes, {report.chunks_written} chunks, {report.embedded} embedded "
        f"in {time.monotonic() - started:.0f}s",
        file=sys.stderr,
    )


def sample_queries() -> tuple[dict[str, str], dict[str, set[str]], dict[str, str]]:
    """The labelled sample_vault queries: texts, relevant notes, kinds."""
    labelled = json.loads((ROOT / "benchmarks/sample_queries.json").read_text())
    queries = {str(i): q["query"] for i, q in enumerate(labelled)}
    qrels = {str(i): set(q["relevant"]) for i, q in enumerate(labelled)}
    kinds = {str(i): q["kind"] for i, q in enumerate(labelled)}
    return queries, qrels, kinds


def eval_sample(workdir: Path, embedder: LocalEmbedder, location: Location | None = None) -> None:
    queries, qrels, kinds = sample_queries()
    where = location or SqliteLocation(workdir / "sample.sqlite")
    with where.open(create=True, vectors_in_memory=True) as store:
        build(store, SAMPLE_VAULT, embedder)
        cached = CachedQueries(embedder)
        configs = {**CONFIGS, "hybrid + decay": Options(mode="hybrid", decay=True)}
        rows = {}
        per_kind: dict[str, dict[str, float]] = {}
        for name, options in configs.items():
            ranked = rankings(store, cached, queries, options)
            rows[name] = score_run(ranked, qrels)
            per_kind[name] = {
                kind: score_run(ranked, {q: r for q, r in qrels.items() if kinds[q] == kind})[
                    "mrr@10"
                ]
                for kind in dict.fromkeys(kinds.values())
            }
    print(f"### sample_vault ({len(queries)} labelled queries, index {where})\n")
    print(table(rows))
    kinds_list = list(dict.fromkeys(kinds.values()))
    print("\nMRR@10 by kind of query:\n")
    print("| configuration | " + " | ".join(kinds_list) + " |")
    print("|---|" + "---|" * len(kinds_list))
    for name, by_kind in per_kind.items():
        print(f"| {name} | " + " | ".join(f"{by_kind[k]:.2f}" for k in kinds_list) + " |")


def compare_backends(workdir: Path, embedder: LocalEmbedder, url: str) -> None:
    """sample_vault indexed into SQLite and into PostgreSQL with the same model: hybrid quality of
    each, and every query whose first note differs, with the scores that explain it."""
    queries, qrels, _ = sample_queries()
    run = Options(mode="hybrid", limit=20, min_score=0.0, today=TODAY)
    cached = CachedQueries(embedder)
    hits = {}
    for label, where in (
        ("SQLite", SqliteLocation(workdir / "sample.sqlite")),
        ("PostgreSQL", PostgresLocation(url, "eval_sample")),
    ):
        with where.open(create=True, vectors_in_memory=True) as store:
            build(store, SAMPLE_VAULT, embedder)
            hits[label] = {q: search(store, t, run, cached).results for q, t in queries.items()}  # type: ignore[arg-type]
    rows = {
        f"hybrid 0.7/0.3, {label}": score_run(
            {q: [h.path for h in found] for q, found in by_query.items()}, qrels
        )
        for label, by_query in hits.items()
    }
    print("\n### sample_vault on both backends\n")
    print(table(rows))
    differ = [
        q
        for q in queries
        if [h.path for h in hits["SQLite"][q][:1]] != [h.path for h in hits["PostgreSQL"][q][:1]]
    ]
    print(f"\nsame first note for {len(queries) - len(differ)} of {len(queries)} queries")
    for q in differ:
        print(f"- {queries[q]!r}:")
        for label in hits:
            shown = ", ".join(f"{h.path} {h.score:.4f}" for h in hits[label][q][:2])
            print(f"  {label}: {shown}")


COPIES = 3  # near-copies of each relevant note in the duplicates case
MMR_LAMBDAS = (0.5, 0.6, 0.7, 0.8, 0.9)


def duplicates_vault(
    workdir: Path, labelled: list[dict[str, object]]
) -> tuple[Path, dict[str, str]]:
    """sample_vault plus COPIES near-copies (trailing spaces, as a sync tool or a copy-paste
    leaves them) of every note some query wants; returns the vault and copy -> original."""
    vault = workdir / "sample_duplicates"
    shutil.rmtree(vault, ignore_errors=True)
    shutil.copytree(SAMPLE_VAULT, vault)
    canonical: dict[str, str] = {}
    wanted = sorted({p for q in labelled for p in q["relevant"]})  # type: ignore[attr-defined]
    for original in wanted:
        text = (vault / original).read_text(encoding="utf-8")
        for k in range(1, COPIES + 1):
            copy = f"copies/{k}/{original}"
            (vault / copy).parent.mkdir(parents=True, exist_ok=True)
            (vault / copy).write_text(text.replace("\n", " " * k + "\n"), encoding="utf-8")
            canonical[copy] = original
    return vault, canonical


def eval_duplicates(workdir: Path, embedder: LocalEmbedder) -> None:
    """The labelled queries again, on a vault where every relevant note has near-copies: how much
    of the top 10 repeats one note, with and without MMR, for each lambda."""
    labelled = json.loads((ROOT / "benchmarks/sample_queries.json").read_text())
    vault, canonical = duplicates_vault(workdir, labelled)
    queries = {str(i): q["query"] for i, q in enumerate(labelled)}
    qrels = {str(i): set(q["relevant"]) for i, q in enumerate(labelled)}
    configs = {"hybrid, no MMR": Options(mode="hybrid")} | {
        f"hybrid + MMR, lambda {lam}": Options(mode="hybrid", mmr=True, mmr_lambda=lam)
        for lam in MMR_LAMBDAS
    }
    (workdir / "duplicates.sqlite").unlink(missing_ok=True)
    with SqliteStore(workdir / "duplicates.sqlite", vectors_in_memory=True) as store:
        build(store, vault, embedder)
        cached = CachedQueries(embedder)
        print(f"\n### sample_vault with {COPIES} near-copies of each relevant note\n")
        print("| configuration | nDCG@10, copies count once | repeats in the top 3 | nDCG@10 |")
        print("|---|---|---|---|")
        for name, options in configs.items():
            ranked = rankings(store, cached, queries, options)
            notes = {q: [canonical.get(p, p) for p in r] for q, r in ranked.items()}
            novelty = sum(novelty_ndcg_at(notes[q], qrels[q], 10) for q in qrels) / len(qrels)
            repeats = sum(3 - len(set(distinct(notes[q][:3]))) for q in qrels) / len(qrels)
            plain = score_run({q: distinct(n) for q, n in notes.items()}, qrels)["ndcg@10"]
            print(f"| {name} | {novelty:.3f} | {repeats:.2f} | {plain:.3f} |")


SCIFACT_LIMIT = 10  # as `memsync query CLAIM -n 10 --min-score 0`: 10 chunks, folded to notes


def _load_scifact(path: Path, split: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    qrels: dict[str, set[str]] = {}
    for line in (path / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(f"{doc}.md")
    queries = {}
    for line in (path / "queries.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["_id"] in qrels:
            queries[record["_id"]] = record["text"]  # the text only, never the metadata
    return queries, qrels


def eval_scifact(path: Path, workdir: Path, embedder: LocalEmbedder) -> None:
    vault = workdir / "scifact_vault"
    if not vault.is_dir():
        vault.mkdir(parents=True)
        with gzip.open(path / "corpus.jsonl.gz", "rt", encoding="utf-8") as corpus:
            for line in corpus:
                doc = json.loads(line)
                (vault / f"{doc['_id']}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n")
    with SqliteStore(workdir / "scifact.sqlite", vectors_in_memory=True) as store:
        build(store, vault, embedder)
        cached = CachedQueries(embedder)
        train_q, train_rel = _load_scifact(path, "train")
        test_q, test_rel = _load_scifact(path, "test")
        tuning = {}
        for weight in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
            options = Options(mode="hybrid", vector_weight=weight, text_weight=1 - weight)
            tuning[f"hybrid {weight:.1f}/{1 - weight:.1f}"] = score_run(
                rankings(store, cached, train_q, options, SCIFACT_LIMIT), train_rel
            )
        best = max(tuning, key=lambda name: tuning[name]["ndcg@10"])
        print(f"### SciFact train ({len(train_q)} queries): tuning the weights\n")
        print(table(tuning))
        weight = float(best.split()[1].split("/")[0])
        configs = {
            **CONFIGS,
            f"hybrid {best.split()[1]} (tuned on train)": Options(
                mode="hybrid", vector_weight=weight, text_weight=1 - weight
            ),
        }
        rows = {
            name: score_run(rankings(store, cached, test_q, o, SCIFACT_LIMIT), test_rel)
            for name, o in configs.items()
        }
    print(f"\n### SciFact test ({len(test_q)} queries)\n")
    print(table(rows))


def _permalink(note: Path) -> str | None:
    found = re.search(r"^permalink:\s*(\S+)", note.read_text(encoding="utf-8")[:2000], re.M)
    return found.group(1) if found else None


HAN = re.compile(r"[\u4e00-\u9fff]")
# (asked in, answered in, a title or heading that may ask): Chinese characters only, or English
# of two words or more (one English word is a keyword lookup, often an alias the page holds)
OBSIDIAN_DIRECTIONS = (
    ("zh", "en", lambda q: len(HAN.findall(q)) >= 2 and not re.search(r"[A-Za-z]", q)),
    ("en", "zh", lambda q: not HAN.search(q) and len(q.split()) >= 2),
)


_H2 = re.compile(r"^## (.+?)\s*$")


def obsidian_questions(
    vault: Path, asked_in: str, answered_in: str, asks: Callable[[str], bool]
) -> tuple[dict[str, str], dict[str, set[str]], dict[str, str]]:
    """Queries, the page in the other language they ask for, and their kind (title or heading)."""
    answers = {
        _permalink(n): n.relative_to(vault).as_posix() for n in (vault / answered_in).rglob("*.md")
    }
    queries: dict[str, str] = {}
    qrels: dict[str, set[str]] = {}
    kinds: dict[str, str] = {}
    for note in sorted((vault / asked_in).rglob("*.md")):
        link = _permalink(note)
        if link not in answers:
            continue
        text = note.read_text(encoding="utf-8")
        asked = [("title", note.stem)] + [
            ("heading", h) for h in re.findall(r"^## (.+?)\s*$", text, re.M)
        ]
        for kind, query in asked:
            if asks(query):
                qid = f"{kind}:{note.relative_to(vault).as_posix()}:{query}"
                queries[qid], qrels[qid], kinds[qid] = query, {answers[link]}, kind
    return queries, qrels, kinds


def eval_obsidian_help(path: Path, workdir: Path, embedder: LocalEmbedder) -> None:
    vault = workdir / "obsidian_help"
    if not vault.is_dir():
        for language in ("en", "zh"):
            shutil.copytree(path / language, vault / language, ignore=_not_markdown)
    cached = CachedQueries(embedder)
    with SqliteStore(workdir / "obsidian_help.sqlite", vectors_in_memory=True) as store:
        build(store, vault, embedder)
        for asked_in, answered_in, asks in OBSIDIAN_DIRECTIONS:
            queries, qrels, kinds = obsidian_questions(vault, asked_in, answered_in, asks)
            only = note_filter(paths=[f"{answered_in}/"])
            rows = {}
            for mode in ("keyword", "vector", "hybrid", "rrf"):
                found = results(store, cached, queries, Options(mode=mode, only=only), 10)
                ranked = {qid: [hit.path for hit in hits] for qid, hits in found.items()}
                for kind in ("title", "heading"):
                    chosen = {q: r for q, r in qrels.items() if kinds[q] == kind}
                    rows[f"{mode}, {kind}s ({len(chosen)})"] = score_run(ranked, chosen)
                if mode == "hybrid":
                    holding, shown = sections_shown(vault, queries, qrels, found)
            print(
                f"\n### Obsidian's help: a title or heading in {asked_in}, its page in {answered_in}\n"
            )
            print(table(rows))
            print(
                f"\nLines shown (hybrid): of the {holding} results holding the asked heading's "
                f"section, {shown} show lines in it: {shown / max(holding, 1):.3f}"
            )


def sections_shown(
    vault: Path, queries: dict[str, str], qrels: dict[str, set[str]], found: dict[str, list[Hit]]
) -> tuple[int, int]:
    """Of the results holding the section a heading question asks for, those whose lines shown
    fall in it. The section is the same-numbered `## ` section of the other page, where both
    pages have as many (a translation keeps its page's sections)."""
    holding = shown = 0
    for qid, text in queries.items():
        kind, asked, _ = qid.split(":", 2)
        [answer] = qrels[qid]
        own, theirs = _sections(vault / asked), _sections(vault / answer)
        if kind != "heading" or len(own) != len(theirs):
            continue
        number = [title for title, _, _ in own].index(text)
        _, first, last = theirs[number]
        for hit in found[qid]:
            if hit.path == answer and hit.start_line <= last and hit.end_line >= first:
                holding += 1
                end = hit.snippet_start + hit.snippet.count("\n")
                shown += hit.snippet_start <= last and end >= first
                break
    return holding, shown


def _sections(note: Path) -> list[tuple[str, int, int]]:
    """Each `## ` heading of the note with its section's first and last line."""
    lines = note.read_text(encoding="utf-8").split("\n")
    starts = [(i + 1, m.group(1)) for i, line in enumerate(lines) if (m := _H2.match(line))]
    ends = [start - 1 for start, _ in starts[1:]] + [len(lines)]
    return [(title, start, end) for (start, title), end in zip(starts, ends)]


def _not_markdown(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".md") and not (Path(folder) / n).is_dir()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", action="store_true")
    parser.add_argument("--scifact", type=Path)
    parser.add_argument(
        "--duplicates", action="store_true", help="MMR on sample_vault with near-copies"
    )
    parser.add_argument("--locomo", type=Path, help="LoCoMo's folder (dev.json.gz)")
    parser.add_argument(
        "--modes", default=",".join(locomo.MODES), help="with --locomo: modes to measure"
    )
    parser.add_argument(
        "--check-cli", type=int, default=20, help="with --locomo: questions re-asked via the CLI"
    )
    parser.add_argument(
        "--obsidian-help", type=Path, help="a checkout of github.com/obsidianmd/obsidian-help"
    )
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "memsync-eval")
    parser.add_argument(
        "--postgres", help="with --sample: a postgresql:// URL, or pgserver to start one"
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    embedder = LocalEmbedder()
    if args.sample:
        eval_sample(args.workdir, embedder)
    if args.sample and args.postgres:
        url = (
            start_pgserver(args.workdir / "pg").get_uri()
            if args.postgres == "pgserver"
            else args.postgres
        )
        compare_backends(args.workdir, embedder, url)
    if args.duplicates:
        eval_duplicates(args.workdir, embedder)
    if args.scifact:
        eval_scifact(args.scifact, args.workdir, embedder)
    if args.locomo:
        locomo.evaluate(args.locomo, args.workdir, args.modes.split(","), args.check_cli)
    if args.obsidian_help:
        eval_obsidian_help(args.obsidian_help, args.workdir, embedder)


if __name__ == "__main__":
    main()
